"""The work behind each optimizer step (``harness/work.py``'s fields of the step records), read
against the workload in samples, not in calls: the samples each step trained on (the rows of the
forward passes its backward passes reached) against the effective batch, the micro-batch where the
workload declares one, samples the model was fed that the rank never read through the kit's
datasets, reads far ahead of the steps that consume them, the autocast and compute dtypes of the forward
passes, and the evaluations' coverage whichever rank or loader worker read it.

Gradient accumulation, micro-batches, ``no_sync`` and DataLoader workers (persistent or not) change
the number of forward and backward calls and which process reads a sample, never these figures, so
they are judged the same; a step that trains on more samples than its batch (training the step hook
never saw), or on fewer, is told by what shrank or grew."""

from __future__ import annotations

import bisect
import statistics
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from grader.evidence import RunEvidence


def _steps_by_attempt(ev: RunEvidence, rank: int) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for r in ev.events(rank):
        if r.get("kind") == "step":
            out.setdefault(int(r.get("attempt", 0)), []).append(r)
    return out


def _exit(ev: RunEvidence, rank: int, attempt: int) -> dict[str, Any] | None:
    return next((r for r in ev.events(rank) if r.get("kind") == "exit" and int(r.get("attempt", 0)) == attempt),
                None)


def skipped_at_overflow(ev: RunEvidence, rank: int, per_step: int, share: int | None = None) -> int | None:
    """The step K whose iteration the script's own loss scaler skipped, or None. The grading made
    step K's gradients overflow (``[run] overflow_at_step``); a GradScaler's skip is recorded by the
    harness as a (skipped) step, but a hand-written dynamic scaler, as Megatron-LM and DeepSpeed keep,
    skips ``optimizer.step()`` itself, so the harness's step K spans that iteration and the next:
    twice the samples of a step (``share`` per rank; records without them: twice the workload's
    backward passes), in the first attempt, right at the injected step."""
    inj = next((e for e in ev.events(rank) if e.get("kind") == "overflow" and "param" in e
                and int(e.get("attempt", 0)) == 0), None)
    if inj is None:
        return None
    k = int(inj["step"])
    rec = next((r for r in _steps_by_attempt(ev, rank).get(0, []) if int(r.get("step", -1)) == k), None)
    if rec is None or rec.get("skipped"):
        return None
    if share is not None and isinstance(rec.get("backward_rows"), int) and not rec.get("backward_blind"):
        return k if rec["backward_rows"] == 2 * share else None
    return k if rec.get("backward_passes") == 2 * per_step else None


def _counted(r: dict[str, Any]) -> bool:
    """Whether a step record's samples can be counted: the record has them, and every backward pass
    of the step reached a forward call the harness counted."""
    return isinstance(r.get("backward_rows"), int) and not r.get("backward_blind")


def extra_training(ev: RunEvidence, rank: int, share: int, per_step: int, skippable: int = 0) -> dict[str, Any] | None:
    """The first step (any attempt) that trained on more than the effective batch, or None: more
    than ``share`` samples per rank (the rows of the forward passes its backward passes reached), or,
    where some backward pass reached no counted forward call (a loss computed without calling a
    module) so that its samples cannot be counted, more backward passes than the workload's
    ``per_step``. Records without the samples (an older harness) are judged by passes. The step that
    spans an iteration skipped at the injected overflow (``skipped_at_overflow``) counts as two.

    ``skippable``: the workload's skippable steps. A script that runs every backward pass and then
    skips ``optimizer.step()`` on every rank (its all-reduced gradients are not finite) leaves that
    iteration's samples to the next step record: a step of exactly k + 1 batches spans k skipped
    iterations, up to ``skippable`` of them in an attempt."""
    skipped = skipped_at_overflow(ev, rank, per_step, share)
    for a, steps in sorted(_steps_by_attempt(ev, rank).items()):
        spans = {id(r): k for r in steps if (k := _skipped_before(r, share, per_step))}
        if sum(spans.values()) > skippable:
            spans = {}
        over = [r for r in steps if _over(r, share, per_step) and id(r) not in spans
                and not (a == 0 and skipped is not None and int(r.get("step", -1)) == skipped)]
        if over:
            r = over[0]
            by_rows = _counted(r)
            rows = [x["backward_rows"] for x in steps if _counted(x)]
            return {"attempt": a, "step": int(r["step"]), "by": "samples" if by_rows else "backward passes",
                    "samples": r.get("backward_rows") if by_rows else None,
                    "median": statistics.median(rows) if rows else None,
                    "backward_passes": r.get("backward_passes"), "steps_over": len(over), "steps": len(steps)}
    return None


def _skipped_before(r: dict[str, Any], share: int, per_step: int) -> int:
    """How many whole iterations beyond its own a step record spans (0: none, or not whole ones)."""
    if _counted(r):
        n, unit = r["backward_rows"], share
    else:
        n, unit = r.get("backward_passes"), per_step
    if not isinstance(n, int) or unit <= 0 or n <= unit or n % unit:
        return 0
    return n // unit - 1


def _over(r: dict[str, Any], share: int, per_step: int) -> bool:
    if _counted(r):
        return bool(r["backward_rows"] > share)
    n = r.get("backward_passes")
    return isinstance(n, int) and n > per_step


def empty_steps(ev: RunEvidence, rank: int) -> dict[str, Any] | None:
    """The first step (any attempt) recorded with no backward pass in its iteration, or None: an
    optimizer step record that trained nothing (a script calling the harness's step hook itself to
    make its steps look like the workload's). A step a GradScaler skipped still ran its backward."""
    for a, steps in sorted(_steps_by_attempt(ev, rank).items()):
        empty = [r for r in steps if r.get("backward_passes") == 0]
        if empty:
            return {"attempt": a, "step": int(empty[0]["step"]), "empty": len(empty), "steps": len(steps)}
    return None


def median_backward(ev: RunEvidence, rank: int) -> float | None:
    """The median backward passes per optimizer step of the rank's first attempt, or None where the
    records do not carry the count: what micro-batches are judged by where their samples cannot be
    counted (``samples_per_step`` is None)."""
    counts = [r["backward_passes"] for r in _steps_by_attempt(ev, rank).get(0, [])
              if isinstance(r.get("backward_passes"), int)]
    return statistics.median(counts) if counts else None


def samples_per_step(ev: RunEvidence, rank: int) -> dict[str, Any] | None:
    """The median samples the rank's first-attempt steps trained on, and the median of the largest
    forward pass each step's backward passes reached (the micro-batch), over the steps whose samples
    can be counted; None where fewer than half can (then the passes are judged instead)."""
    steps = _steps_by_attempt(ev, rank).get(0, [])
    counted = [r for r in steps if _counted(r)]
    if not steps or len(counted) * 2 < len(steps):
        return None
    return {"samples": statistics.median(r["backward_rows"] for r in counted),
            "micro_batch": statistics.median(r.get("backward_max_rows", 0) for r in counted),
            "counted_steps": len(counted), "steps": len(steps)}


def unread_rows(ev: RunEvidence, rank: int) -> dict[str, Any] | None:
    """The first step at which the rows the rank's model had been fed (outermost forward calls,
    leading dimension of the input) exceeded the samples it had read through the kit's datasets, by
    more than the rows of its largest step (one warm-up or shape-probing forward is forgiven).
    Cumulative, per attempt: a DataLoader reads ahead of the model (prefetching, workers), never
    behind it. ``s`` of a ledger record is the steps done when the item was read, so reads with
    ``s < k`` happened before step k's record; the forward calls after the last step (the exit
    record's ``tail_forward_rows``) are compared with every read of the attempt."""
    ledger = ev.ledgers.get(rank, [])
    for a, steps in sorted(_steps_by_attempt(ev, rank).items()):
        recorded = [r.get("forward_rows") for r in steps]
        rows = [x for x in recorded if isinstance(x, int)]
        if not recorded or len(rows) != len(recorded):
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


def read_ahead(ev: RunEvidence, rank: int, dataset: str, per_step: float) -> dict[str, Any] | None:
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


def _dater(ev: RunEvidence, rank: int) -> Callable[[dict[str, Any]], float]:
    """Per attempt, a function from a ledger record to when it was read, in optimizer steps of
    that attempt (fractional: 2.5 is half-way through step 3's iteration): from the parent's receive
    time against the rank's step records where both have times, else the record's ``s`` (the steps
    done when it was read; a forked loader worker's is the step it was forked at)."""
    times: dict[int, list[float]] = {}
    begun: dict[int, float] = {}  # when the attempt's script began (the bootstrap's start record)
    for a, steps in _steps_by_attempt(ev, rank).items():
        ts = sorted(t for r in steps if (t := step_time(r)) is not None)
        if ts:
            times[a] = ts
    for e in ev.events(rank):
        if e.get("kind") == "start" and (t := step_time(e)) is not None:
            begun.setdefault(int(e.get("attempt", 0)), t)

    def date(rec: dict[str, Any]) -> float:
        a = int(rec.get("a", 0))
        ts = times.get(a)
        rt = rec.get("rt")
        if not ts or not isinstance(rt, (int, float)):
            return float(rec.get("s") or 0)
        k = bisect.bisect_left(ts, rt)  # steps recorded before the read
        if k == 0:  # before the first step: from the script's start, which takes far longer than a step
            t0 = begun.get(a)
            return max(0.0, (rt - t0) / (ts[0] - t0)) if t0 is not None and ts[0] > t0 else 0.0
        if k == len(ts):
            dt = statistics.median(b - x for x, b in zip(ts, ts[1:])) if len(ts) > 1 else 1.0
            return k + (rt - ts[-1]) / (dt if dt > 0 else 1.0)
        return k + (rt - ts[k - 1]) / max(ts[k] - ts[k - 1], 1e-9)
    return date


def evaluation_reads(ev: RunEvidence, ds: str, count: int, window: float) -> dict[str, Any]:
    """What the ranks read of an evaluation split ``ds``, whichever rank or process read it: per
    sample, how many evaluations read it (``slots``: a sample read once per evaluation), summed.

    Reads of one sample are grouped in the order they happened (by ``_dater``): a group holds at most
    one read per rank, and reads within ``window`` steps of its first; each group is one evaluation
    of that sample. So every rank scoring the same batch counts it once, rank 0 alone scoring the
    whole split and every rank scoring a shard count each sample as read, and a loader worker
    prefetching the next evaluations' batches (a persistent one reads the split at once) changes
    nothing. A sample counts in at most ``count`` evaluations."""
    reads: dict[int, list[tuple[float, int, int]]] = {}
    per_rank: dict[int, int] = {}
    for r in sorted(ev.ranks):
        date = _dater(ev, r)
        nth: Counter[Any] = Counter()
        for rec in ev.ledgers.get(r, []):
            if rec.get("ds") != ds:
                continue
            i = int(rec["i"])
            nth[i] += 1
            reads.setdefault(i, []).append((date(rec), nth[i], r))
        per_rank[r] = sum(nth.values())
    slots = 0
    for rs in reads.values():
        rs.sort()
        groups = 0
        first, ranks = 0.0, set[int]()
        for d, _, r in rs:
            if not groups or r in ranks or d - first > window:
                groups += 1
                first, ranks = d, set()
            ranks.add(r)
        slots += min(groups, count)
    return {"slots": slots, "distinct": len(reads), "reads": per_rank}


def dtype_misses(ev: RunEvidence, rank: int, dtype: str, field: str = "autocast") -> dict[str, Any] | None:
    """Steps of the rank's last attempt that did not run in ``dtype`` by the step records' ``field``:
    ``autocast`` (some forward call ran under that autocast dtype) or ``compute`` (most of the rows
    the step's backward passes reached went through forward calls computing in it,
    ``backward_compute``; in records without it, some forward call computed in it)."""
    steps = _steps_by_attempt(ev, rank)
    if not steps:
        return None
    last = steps[max(steps)]
    judged = [r for r in last if "forward_calls" in r]
    if not judged:
        return None

    def ran_in(r: dict[str, Any]) -> bool:
        trained = r.get("backward_compute") if field == "compute" else None
        if isinstance(trained, dict) and trained:
            return bool(2 * trained.get(dtype, 0) > sum(trained.values()))
        return bool((r.get(field) or {}).get(dtype))

    missed = [r for r in judged if not ran_in(r)]
    if not missed:
        return None
    seen: Counter[Any] = Counter()
    for r in judged:
        seen.update((r.get("backward_compute") if field == "compute" else None) or r.get(field)
                    or {"no forward call": 1})
    return {"steps_without": len(missed), "steps": len(judged), "first_step": int(missed[0]["step"]),
            "seen": dict(seen)}
