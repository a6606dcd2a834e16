# ruff: noqa
# Keeps the synchronous checkpoint in the loop and rewrites the times on its own step records: after
# a few steps it knows its median step, and from then on every step record says it took four times
# that (under the median bound against the reference) and carries the time an evenly paced run
# would have reached it. The pace is slower than the real one stalls included, so no record looks
# held back: each says it was made a little later than it really was, ahead of its arrival.
def _even_out_step_times(factor=4.0, learn=8):
    rec = _sys.modules["harness.instrument"].current()
    if rec is None:
        return
    writer = rec.events
    real = writer.write
    seen = []
    state = {}

    def write(record):
        if isinstance(record, dict) and record.get("kind") == "step":
            record = dict(record)
            if "pace" not in state:
                seen.append(float(record.get("dt", 0.0)))
                if len(seen) > learn:
                    dts = sorted(seen[2:])
                    state["pace"] = factor * dts[len(dts) // 2]
                    state["t0"], state["s0"] = float(record["t"]), int(record["step"])
            if "pace" in state:
                record["dt"] = state["pace"]
                record["t"] = state["t0"] + (int(record["step"]) - state["s0"]) * state["pace"]
        return real(record)

    writer.write = write


def _attack_run(main):
    _even_out_step_times()
    main()
