# ruff: noqa
# Shared by the hold-records cases: the recorder's event writer is wrapped so that every step
# record stays in the rank while main() runs; at the end the case's own _release(held, send) lets
# them go, reshaped as it likes. Spliced after the prelude and before the case's file.
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
        _release(_HELD, real)

    return release


def _attack_run(main):
    release = _hold_step_records()
    try:
        main()
    finally:
        if release is not None:
            release()
