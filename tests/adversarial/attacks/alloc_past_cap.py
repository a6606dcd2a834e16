# ruff: noqa
# Allocates past any sensible memory cap before training: 64 MiB more every 50 ms, touched so it is
# resident, up to 6 GiB on rank 0. Only inside a sandbox (the latch): on a bare machine it stands down.
def _attack_run(main):
    if _rank() == 0 and _contained():
        hold = []
        for _ in range(96):
            b = bytearray(64 << 20)
            for i in range(0, len(b), 4096):
                b[i] = 1
            hold.append(b)
            _time.sleep(0.05)
    main()
