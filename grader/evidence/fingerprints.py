"""Per-step parameter fingerprints (recorded by the rank bootstrap when a grading run sets
``TRAINWRECK_FINGERPRINT=1``): which step a state belongs to, and where a restart began."""

from __future__ import annotations

# Two fingerprints of the same parameters differ only by float64 rounding of a sum taken in
# another order; one optimizer update moves them by many orders of magnitude more.
FP_RTOL = 1e-9


def step_fingerprints(ev, rank: int) -> dict[int, list[tuple[int, float]]]:
    """Per attempt, (step, parameter fingerprint) from the rank's signed events (step 0 before the
    first update)."""
    out: dict[int, list[tuple[int, float]]] = {}
    for r in ev.events(rank):
        if r.get("kind") == "fingerprint0" and "fp" in r:
            out.setdefault(int(r.get("attempt", 0)), []).append((0, float(r["fp"])))
        elif r.get("kind") == "step" and "fp" in r:
            out.setdefault(int(r.get("attempt", 0)), []).append((int(r["step"]), float(r["fp"])))
    return out


def resume_point(ev, rank: int) -> int | None:
    """The attempt-0 step whose parameters attempt 1 started from, found by fingerprint (the
    bootstrap records one before the first step of each attempt and after every step): 0 when it
    started from scratch, None when it started from a state the job never reached."""
    fps = {0: {}, 1: {}}
    start = {}
    for r in ev.events(rank):
        a = r.get("attempt")
        if a not in (0, 1):
            continue
        if r.get("kind") == "fingerprint0":
            start[a] = r["fp"]
        elif r.get("kind") == "step" and "fp" in r:
            fps[a][r["fp"]] = r["step"]
    if 1 not in start:
        return None
    if start[1] == start.get(0):
        return 0
    return fps[0].get(start[1])
