# ruff: noqa
# Holds every step record in the rank (the recorder's event writer, wrapped in its own process)
# while the leak grows, and lets them all go at the end in one burst, each with a flat RSS and flat
# counts of graph nodes and live tensors (the first step's), stamped with the time it is sent so
# that none looks held back. The parent's memory samples are taken while no step record arrives:
# the attack bets that, with nothing to align them to, the steps' memory falls back to what the
# rank said of itself.
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
        first = {}
        for r in _HELD:
            for k in ("rss_mb", "graph_nodes", "live_bytes", "live_tensors"):
                if k in r and k not in first:
                    first[k] = r[k]
        for r in _HELD:
            for k, v in first.items():
                if k in r:
                    r[k] = v
            r["t"] = _time.time()
            real(r)

    return release


def _attack_run(main):
    release = _hold_step_records()
    try:
        main()
    finally:
        if release is not None:
            release()
