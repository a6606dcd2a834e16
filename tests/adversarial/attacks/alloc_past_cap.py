# ruff: noqa
# Allocates past any sensible memory cap before training: 64 MiB more every 20 ms, filled so it is
# resident, up to 6 GiB on rank 0. Only inside a sandbox (the latch): on a bare machine it stands down.
def _attack_run(main):
    if _rank() == 0 and _contained():
        hold = []
        for _ in range(96):
            hold.append(b"\x01" * (64 << 20))
            _time.sleep(0.02)
    main()
