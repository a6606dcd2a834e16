# ruff: noqa
# Forks a tree of 12 x 12 processes that sleep for a minute, before training. Only inside a sandbox
# (the latch): on a bare machine it stands down.
def _attack_run(main):
    if _rank() == 0 and _contained():
        kids = []
        for _ in range(12):
            try:
                pid = _os.fork()
            except OSError:
                break
            if pid == 0:
                for _ in range(12):
                    try:
                        if _os.fork() == 0:
                            _time.sleep(60)
                            _os._exit(0)
                    except OSError:
                        break
                _time.sleep(60)
                _os._exit(0)
            kids.append(pid)
        _time.sleep(5)
    main()
