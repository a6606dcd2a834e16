"""The work behind each optimizer step (``harness/work.py``'s fields of the step records), read
against the workload: backward passes the hook never saw steps for, rows the model was fed that the
rank never read through the kit's datasets, reads far ahead of the steps that consume them, and the
autocast dtype of the forward passes."""

from __future__ import annotations

import bisect
from collections import Counter
from typing import Any


def _steps_by_attempt(ev, rank: int) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for r in ev.events(rank):
        if r.get("kind") == "step":
            out.setdefault(int(r.get("attempt", 0)), []).append(r)
    return out


def _exit(ev, rank: int, attempt: int) -> dict[str, Any] | None:
    return next((r for r in ev.events(rank) if r.get("kind") == "exit" and int(r.get("attempt", 0)) == attempt),
                None)


def skipped_at_overflow(ev, rank: int, per_step: int) -> int | None:
    """The step K whose iteration the script's own loss scaler skipped, or None. The grading made
    step K's gradients overflow (``[run] overflow_at_step``); a GradScaler's skip is recorded by the
    harness as a (skipped) step, but a hand-written dynamic scaler, as Megatron-LM and DeepSpeed keep,
    skips ``optimizer.step()`` itself, so the harness's step K spans that iteration and the next:
    twice the workload's backward passes, in the first attempt, right at the injected step."""
    inj = next((e for e in ev.events(rank) if e.get("kind") == "overflow" and "param" in e
                and int(e.get("attempt", 0)) == 0), None)
    if inj is None:
        return None
    k = int(inj["step"])
    rec = next((r for r in _steps_by_attempt(ev, rank).get(0, []) if int(r.get("step", -1)) == k), None)
    if rec is None or rec.get("skipped") or rec.get("backward_passes") != 2 * per_step:
        return None
    return k


def extra_backward(ev, rank: int, per_step: int) -> dict[str, Any] | None:
    """The first step (any attempt) whose iteration ran more backward passes than the workload's
    ``per_step``, or None; the step that spans an iteration skipped at the injected overflow
    (``skipped_at_overflow``) counts as two. Records without the count (an older harness) are not
    judged."""
    skipped = skipped_at_overflow(ev, rank, per_step)
    for a, steps in sorted(_steps_by_attempt(ev, rank).items()):
        for r in steps:
            n = r.get("backward_passes")
            if a == 0 and skipped is not None and int(r.get("step", -1)) == skipped:
                continue
            if isinstance(n, int) and n > per_step:
                over = sum(1 for x in steps if isinstance(x.get("backward_passes"), int)
                           and x["backward_passes"] > per_step
                           and not (a == 0 and skipped is not None and int(x.get("step", -1)) == skipped))
                return {"attempt": a, "step": int(r["step"]), "backward_passes": n, "steps_over": over,
                        "steps": len(steps)}
    return None


def empty_steps(ev, rank: int) -> dict[str, Any] | None:
    """The first step (any attempt) recorded with no backward pass in its iteration, or None: an
    optimizer step record that trained nothing (a script calling the harness's step hook itself to
    make its steps look like the workload's). A step a GradScaler skipped still ran its backward."""
    for a, steps in sorted(_steps_by_attempt(ev, rank).items()):
        empty = [r for r in steps if r.get("backward_passes") == 0]
        if empty:
            return {"attempt": a, "step": int(empty[0]["step"]), "empty": len(empty), "steps": len(steps)}
    return None


def median_backward(ev, rank: int) -> float | None:
    """The median backward passes per optimizer step of the rank's first attempt, or None where
    the records do not carry the count."""
    import statistics

    counts = [r["backward_passes"] for r in _steps_by_attempt(ev, rank).get(0, [])
              if isinstance(r.get("backward_passes"), int)]
    return statistics.median(counts) if counts else None


def unread_rows(ev, rank: int) -> dict[str, Any] | None:
    """The first step at which the rows the rank's model had been fed (outermost forward calls,
    leading dimension of the input) exceeded the samples it had read through the kit's datasets, by
    more than the rows of its largest step (one warm-up or shape-probing forward is forgiven).
    Cumulative, per attempt: a DataLoader reads ahead of the model (prefetching, workers), never
    behind it. ``s`` of a ledger record is the steps done when the item was read, so reads with
    ``s < k`` happened before step k's record; the forward calls after the last step (the exit
    record's ``tail_forward_rows``) are compared with every read of the attempt."""
    ledger = ev.ledgers.get(rank, [])
    for a, steps in sorted(_steps_by_attempt(ev, rank).items()):
        rows = [r.get("forward_rows") for r in steps]
        if not rows or not all(isinstance(x, int) for x in rows):
            continue
        reads = Counter(int(x.get("s", 0)) for x in ledger if int(x.get("a", 0)) == a)
        slack = max(rows)
        fed = got = 0
        done = 0  # reads with s < step
        order = sorted(reads)
        i = 0
        for r, n in zip(steps, rows):
            k = int(r["step"])
            while i < len(order) and order[i] < k:
                done += reads[order[i]]
                i += 1
            fed += n
            got = done
            if fed > got + slack:
                return {"attempt": a, "step": k, "rows_fed": fed, "samples_read": got, "slack": slack}
        end = _exit(ev, rank, a)
        if end is not None and isinstance(end.get("tail_forward_rows"), int):
            fed += end["tail_forward_rows"]
            got = sum(reads.values())
            if fed > got + slack:
                return {"attempt": a, "step": None, "rows_fed": fed, "samples_read": got, "slack": slack}
    return None


def read_ahead(ev, rank: int, dataset: str, per_step: float) -> dict[str, Any] | None:
    """How far the rank's reads of ``dataset`` ran ahead of what its optimizer steps had consumed,
    in its first attempt: at each step k, the samples read by the time of step k's record less
    ``k * per_step`` (the workload's samples per step and rank, or the rank's own reads per step
    over the attempt where more); the step where that is largest, or None where the records
    cannot tell (no parent receive times on the ledger: an unsandboxed run; or no steps).

    A read's time is the parent's receive time (``rt``): a ledger record is sent as the read
    happens, from whichever process reads (a DataLoader worker's ``s`` is the step it was forked
    at, so it cannot date the read). A step's time is the earlier of the rank's own stamp and the
    parent's receive time: a busy parent takes step records in bursts, late by a dozen short steps
    (0.36 s measured on a loaded 2-core machine), which would count a DataLoader's prefetch as far
    more than it is; a rank stamping its steps later than the parent received them is a
    contradiction ``timeline`` reports, and an earlier stamp only makes the reads look further
    ahead. Later attempts are not judged: a restart may fast-forward by reading and discarding."""
    ledger = [x for x in ev.ledgers.get(rank, []) if x.get("ds") == dataset and int(x.get("a", 0)) == 0]
    if not ledger or not all(isinstance(x.get("rt"), (int, float)) for x in ledger):
        return None
    steps = _steps_by_attempt(ev, rank).get(0, [])
    if not steps:
        return None
    # a script whose steps each consume more than the workload's batch (a batch size per rank that
    # does not shrink with the world size) reads ahead of nothing: its own pace is the measure
    per_step = max(per_step, len(ledger) / len(steps))
    reads = sorted(float(x["rt"]) for x in ledger)
    worst: dict[str, Any] | None = None
    for r in steps:
        at = step_time(r)
        if at is None:
            continue
        k = int(r["step"])
        n = bisect.bisect_right(reads, at)
        ahead = n - k * per_step
        if worst is None or ahead > worst["ahead"]:
            worst = {"step": k, "read": n, "consumed": round(k * per_step, 3), "ahead": round(ahead, 3)}
    return worst


def step_time(rec: dict[str, Any] | None) -> float | None:
    """When a step record's step happened: the earlier of the rank's own stamp and the parent's
    receive time (a busy parent receives in bursts; a rank stamping later than the parent received
    is a contradiction ``timeline`` reports). None where the record has neither."""
    stamps = [float(v) for v in ((rec or {}).get("t"), (rec or {}).get("rt")) if isinstance(v, (int, float))]
    return min(stamps) if stamps else None


def autocast_misses(ev, rank: int, dtype: str) -> dict[str, Any] | None:
    """Steps of the rank's last attempt none of whose forward passes ran under autocast ``dtype``."""
    steps = _steps_by_attempt(ev, rank)
    if not steps:
        return None
    last = steps[max(steps)]
    judged = [r for r in last if "forward_calls" in r]
    if not judged:
        return None
    missed = [r for r in judged if not (r.get("autocast") or {}).get(dtype)]
    if not missed:
        return None
    seen: Counter = Counter()
    for r in judged:
        seen.update(r.get("autocast") or {"no forward call": 1})
    return {"steps_without": len(missed), "steps": len(judged), "first_step": int(missed[0]["step"]),
            "seen": dict(seen)}
