# ruff: noqa
# Takes the planned kill out of its own process: the wait the fault hook ends in is disarmed and
# the fault's record dropped, and from there on every record claims attempt 1.0, as if the job had
# been killed and restarted (the attempt written as a float, which the grader once let through).
# The resume itself stays broken.
def _install_disarm():
    import sys
    from harness import instrument

    rec = instrument.current()
    faults = sys.modules.get("harness.faults")
    if rec is None or faults is None:
        return
    faults.await_kill = lambda: None
    real = rec.event

    def event(kind, **fields):
        if kind == "fault":
            rec.attempt = 1.0
            return None
        return real(kind, **fields)

    rec.event = event


def _attack_run(main):
    _install_disarm()
    main()
