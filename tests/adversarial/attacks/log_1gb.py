# ruff: noqa
# Writes 1 GiB to stderr without a single newline, then dies without a Python traceback: whoever
# explains the failure reads the log's "last lines".
def _attack_run(main):
    if _rank() == 0:
        chunk = b"x" * (1 << 20)
        for _ in range(1024):
            _os.write(2, chunk)
        _os._exit(3)
    main()
