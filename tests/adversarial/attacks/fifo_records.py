# ruff: noqa
# After the bootstrap's last record, replaces its own record files with FIFOs: the harness's
# parent reads them to summarise the run, and an open() of a FIFO with no writer never returns.
import atexit as _atexit


def _trap():
    from harness import rundir

    d = rundir.rank_dir(_run_dir(), _rank())
    for name in (rundir.EVENTS, rundir.SAMPLES):
        p = d / name
        try:
            if p.exists():
                p.unlink()
                _os.mkfifo(p)
                _succeeded(f"fifo-planted-as-{name}", str(p))
        except OSError as e:
            print(f"planting a FIFO failed: {e!r}", file=_sys.stderr)


def _attack_run(main):
    _atexit.register(_trap)
    main()
