# ruff: noqa
# Fills the disk before training: 3 GiB allocated in its working folder (six 512 MiB files) and as
# much of /tmp as it gets. Only inside a sandbox (the latch): on a bare machine it stands down.
def _attack_run(main):
    if _rank() == 0 and _contained():
        for i in range(6):
            try:
                fd = _os.open(f"fill-{i}.bin", _os.O_CREAT | _os.O_WRONLY, 0o600)
                _os.posix_fallocate(fd, 0, 512 << 20)
                _os.close(fd)
            except OSError as e:
                print(f"fill-{i}: {e!r}", file=_sys.stderr)
        try:
            with open("/tmp/fill.bin", "wb") as f:
                for _ in range(1024):
                    f.write(b"\0" * (1 << 20))
        except OSError as e:
            print(f"/tmp: {e!r}", file=_sys.stderr)
        _time.sleep(5)
    main()
