"""Per-step parameter fingerprints (recorded by the rank bootstrap when a grading run sets
``TRAINWRECK_FINGERPRINT=1``): which step a state belongs to, and where a restart began."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from grader.evidence import RunEvidence

# Two fingerprints of the same parameters differ only by float64 rounding of a sum taken in
# another order; one optimizer update moves them by many orders of magnitude more.
FP_RTOL = 1e-9


def step_fingerprints(ev: RunEvidence, rank: int) -> dict[int, list[tuple[int, float]]]:
    """Per attempt, (step, parameter fingerprint) from the rank's signed events (step 0 before the
    first update)."""
    out: dict[int, list[tuple[int, float]]] = {}
    for r in ev.events(rank):
        if r.get("kind") == "fingerprint0" and "fp" in r:
            out.setdefault(int(r.get("attempt", 0)), []).append((0, float(r["fp"])))
        elif r.get("kind") == "step" and "fp" in r:
            out.setdefault(int(r.get("attempt", 0)), []).append((int(r["step"]), float(r["fp"])))
    return out


def resume_point(ev: RunEvidence, rank: int) -> int | None:
    """The attempt-0 step whose parameters attempt 1 started from, found by fingerprint (the
    bootstrap records one before the first step of each attempt and after every step): 0 when it
    started from scratch, None when it started from a state the job never reached."""
    fps: dict[int, dict[Any, int]] = {0: {}, 1: {}}  # attempt -> fingerprint -> the step it was taken after
    start: dict[int, Any] = {}  # attempt -> its fingerprint before its first step
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


def _same(a: Any, b: Any) -> bool:  # two recorded fingerprints (JSON numbers)
    x, y = float(a), float(b)
    if x != x or y != y:  # NaN parameters stay NaN: the same (corrupted) state
        return x != x and y != y
    return abs(x - y) <= FP_RTOL * max(abs(x), abs(y), 1e-12)


def unobserved_change(ev: RunEvidence, rank: int) -> dict[str, Any] | None:
    """The first change of the rank's parameters outside an optimizer step the harness observed,
    or None. The bootstrap fingerprints the parameters when a step begins (``fp_pre``, from the
    step pre-hook; a step GradScaler skipped has none, and its ``fp`` is the state it left
    untouched), when it ends (``fp``), and at exit (``fp_exit``, per parameter set, ``opt``). Within
    an attempt, each step must begin where the previous step of the same parameter set ended, and
    the exit must find the parameters where the last step left them. Before the first step of an
    attempt anything may happen (building the model, loading a checkpoint): ``fingerprint0``.

    Returns ``{"attempt", "after_step", "step", "relative_difference"}`` for a change between two
    steps, ``{"attempt", "after_step", "exit": True, ...}`` for one after the last step."""
    last: dict[int, dict[int, tuple[int, float]]] = {}  # attempt -> opt -> (step, fp after it)
    for r in ev.events(rank):
        a = int(r.get("attempt", 0))
        kind = r.get("kind")
        if kind == "step" and "fp" in r:
            opt = int(r.get("opt", 0))
            start = r.get("fp_pre", r["fp"] if r.get("skipped") else None)
            prev = last.setdefault(a, {}).get(opt)
            if start is not None and prev is not None and not _same(start, prev[1]):
                return {"attempt": a, "after_step": prev[0], "step": int(r["step"]),
                        "relative_difference": _rel(start, prev[1])}
            last[a][opt] = (int(r["step"]), float(r["fp"]))
        elif kind == "exit" and isinstance(r.get("fp_exit"), list):
            for opt, fp in enumerate(r["fp_exit"]):
                prev = last.get(a, {}).get(opt)
                if fp is not None and prev is not None and not _same(fp, prev[1]):
                    return {"attempt": a, "after_step": prev[0], "exit": True,
                            "relative_difference": _rel(fp, prev[1])}
    return None


def _rel(a: Any, b: Any) -> float:
    x, y = float(a), float(b)
    if x != x or y != y:
        return float("inf")
    return abs(x - y) / max(abs(y), 1e-12)
