"""Records that contradict each other. A script runs in the same process as the recorder and can
bend what it is measured with (a virtual clock for the artifact store, a patched ``time``); the
records then disagree with each other or with the parent's own clock, and that disagreement is
evidence. Each rule is cheap and loose enough that an honest run on a loaded machine never meets
it (the margins are in the constants):

- a save, copy or rename whose ``dur`` (``time.perf_counter`` around the call) is longer than the
  wall time between its own ``begin`` and ``end`` records (``time.time``, taken outside the call);
- an artifact-store upload whose ``dur`` is longer than the wall time from the start of the copy
  the save trace shows it making (``.<name>.partial`` in the store) to the upload's own record;
- where records carry the parent's receive time ``rt`` (the record channel): a record written
  after the parent received it (``t > rt``), or a rank's clock falling behind the parent's over an
  attempt (the lag ``rt - t`` of the last step records exceeds that of the first ones by more than
  any transport delay explains).
"""

from __future__ import annotations

import os
import statistics
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from grader.evidence import RunEvidence

# a duration may exceed the wall time around it by at most this factor plus this many seconds
# (an upload's own clock starts a moment before the copy's begin record: on a loaded machine the
# thread can wait that long for the GIL or the CPU)
DUR_FACTOR, DUR_SLACK_S = 1.1, 0.25
# a record's own time may be at most this far after the parent received it
RT_AHEAD_S = 1.0
# the lag of the last step records over the first ones: at most this plus this share of the span
DRIFT_S, DRIFT_SHARE = 2.0, 0.1
EDGE = 5  # step records at each end of an attempt whose lag is compared (medians)


def contradictions(ev: RunEvidence) -> list[dict[str, Any]]:
    """Every contradiction found in one run, as ``{"rank", "what", ...}`` (``what``: a sentence)."""
    out: list[dict[str, Any]] = []
    out += _durations(ev)
    for r in sorted(ev.ranks):
        out += _uploads(ev, r)
        out += _clock(ev, r)
    return out


def _too_long(dur: float, wall: float) -> bool:
    return dur > wall * DUR_FACTOR + DUR_SLACK_S


def _durations(ev: RunEvidence) -> list[dict[str, Any]]:
    out = []
    for op in list(ev.file_ops) + list(ev.file_loads):
        if op.t_end is None or op.dur is None:
            continue
        wall = op.t_end - op.t_begin
        if _too_long(op.dur, wall):
            out.append({"rank": op.rank, "what": f"rank {op.rank}'s {op.op} of {os.path.basename(op.path or '?')} "
                        f"says it took {op.dur:.3f} s, but its own begin and end records are {wall:.3f} s apart",
                        "dur": op.dur, "wall": wall})
    return out


def _uploads(ev: RunEvidence, rank: int) -> list[dict[str, Any]]:
    copies = [op for op in ev.file_ops if op.rank == rank and op.op == "copy" and op.path]
    out = []
    for r in ev.events(rank):
        if r.get("kind") != "upload" or not isinstance(r.get("dur"), (int, float)) or not r.get("path"):
            continue
        dst = str(r["path"])
        partial = os.path.join(os.path.dirname(dst), f".{os.path.basename(dst)}.partial")
        began = [c.t_begin for c in copies if c.path == partial and c.attempt == int(r.get("attempt", 0))
                 and c.t_begin <= float(r["t"])]
        if not began:
            continue
        wall = float(r["t"]) - max(began)
        if _too_long(float(r["dur"]), wall):
            out.append({"rank": rank, "what": f"rank {rank}'s upload of {os.path.basename(dst)} says it took "
                        f"{float(r['dur']):.3f} s, but the copy it made began {wall:.3f} s before its record",
                        "dur": float(r["dur"]), "wall": wall})
    return out


def _clock(ev: RunEvidence, rank: int) -> list[dict[str, Any]]:
    recs = [r for r in ev.events(rank) if isinstance(r.get("rt"), (int, float)) and isinstance(r.get("t"), (int, float))]
    if not recs:
        return []
    out = []
    ahead = [r for r in recs if r["t"] > r["rt"] + RT_AHEAD_S]
    if ahead:
        r = ahead[0]
        out.append({"rank": rank, "what": f"rank {rank}'s {r.get('kind')} record (attempt {r.get('attempt', 0)}) "
                    f"is dated {r['t'] - r['rt']:.1f} s after the parent received it", "records": len(ahead)})
    by_attempt: dict[int, list[dict[str, Any]]] = {}
    for r in recs:
        if r.get("kind") == "step":
            by_attempt.setdefault(int(r.get("attempt", 0)), []).append(r)
    for a, steps in sorted(by_attempt.items()):
        if len(steps) < 2 * EDGE:
            continue
        lag0 = statistics.median(r["rt"] - r["t"] for r in steps[:EDGE])
        lag1 = statistics.median(r["rt"] - r["t"] for r in steps[-EDGE:])
        span = steps[-1]["rt"] - steps[0]["rt"]
        if lag1 - lag0 > DRIFT_S + DRIFT_SHARE * span:
            out.append({"rank": rank, "what": f"rank {rank}'s clock fell {lag1 - lag0:.1f} s behind the parent's over "
                        f"{len(steps)} steps of attempt {a} ({span:.1f} s by the parent's clock)",
                        "drift_s": lag1 - lag0, "span_s": span})
    return out
