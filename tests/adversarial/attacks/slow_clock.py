# ruff: noqa
# Leaves the slow input pipeline as it is and slows down the harness's clock instead: the
# recorder's `time` becomes a stand-in whose time() runs 2.5 times slower than the wall clock, so
# every step record claims 2.5 times the speed. Correctness is untouched (the trajectory passes);
# only the steps/s the throughput check reads from the step records change.
def _slow_the_harness_clock(factor=2.5):
    import time as real
    import types

    from harness import instrument

    t0 = real.time()
    shim = types.ModuleType("time")
    shim.__dict__.update(real.__dict__)
    shim.time = lambda: t0 + (real.time() - t0) / factor
    instrument.time = shim


def _attack_run(main):
    _slow_the_harness_clock()
    main()
