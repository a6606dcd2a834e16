"""sample_partition: which samples each rank really consumed, from the datasets' signed ledger.

Epochs are not taken from the script (whose epoch counter may be the bug): each rank's consumption
is cut into consecutive shares of ceil(dataset_size / world_size) samples, the amount a correct
DistributedSampler hands a rank per epoch. Share k of every rank is "epoch k".

DataLoader workers read ahead of the steps and append their reads to the ledger in whatever order
the parent receives them, so across a kill and restart the order is compared with a tolerance: a
rank's reads may stray from the uninterrupted run's order by the rank's read-ahead (measured from
the parent's receive times, ``grader/evidence/work.py``) plus one step's batch, in each of the two
runs compared; what was read must still be exactly what the uninterrupted run reads (the same
samples, as many), and reads past the last step made before the kill count as read ahead, not as
trained on. A rank that reads nothing ahead is compared exactly.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from grader.checks.base import Check, CheckResult, CheckSpec, Context, need, need_trained, ranges
from grader.evidence.fingerprints import resume_point
from grader.evidence.work import read_ahead, step_time
from grader.roles import FINGERPRINTS, Role, RunRequest
from harness.launch import Fault

if TYPE_CHECKING:
    from grader.evidence import RunEvidence
    from grader.manifest import Manifest

# Positions an index may move between two epochs and still count as "the same order": DataLoader
# workers interleave their batches in the ledger, so equal orders are not always equal lists.
ORDER_WINDOW = 8
SAME_ORDER_FRACTION = 0.9


def same_order_fraction(a: list[int], b: list[int]) -> float:
    pos = {x: i for i, x in enumerate(a)}
    near = sum(1 for j, x in enumerate(b) if x in pos and abs(pos[x] - j) <= ORDER_WINDOW)
    return near / max(len(b), 1)


class Spec(CheckSpec):
    name: Literal["sample_partition"]
    resume: bool = False  # also kill a rank mid-run and compare the resumed run's consumption
    kill_rank: int = Field(1, ge=0)
    kill_step: int = Field(10, gt=0)
    padding: int = Field(0, ge=0, description="duplicates allowed per epoch (sampler padding)")


def runs(spec: Spec, manifest: Manifest) -> list[RunRequest]:
    if not spec.resume:
        return []
    return [RunRequest(Role.RESUME, manifest.world_size, max_restarts=1,
                       faults=(Fault(rank=spec.kill_rank, step=spec.kill_step),), env=FINGERPRINTS)]


def judge(spec: Spec, ctx: Context) -> CheckResult:
    name = "sample_partition"
    ev = need_trained(ctx, name)
    if isinstance(ev, CheckResult):
        return ev
    wl = ctx.manifest.workload
    n, w = wl.dataset_size, ev.world_size
    share = math.ceil(n / w)
    seqs = {r: ev.samples(r, wl.dataset) for r in sorted(ev.ranks)}
    epochs = min(len(s) for s in seqs.values()) // share
    evidence: dict[str, Any] = {"dataset_size": n, "world_size": w, "share_per_rank": share,
                                "samples_per_rank": {r: len(s) for r, s in seqs.items()}, "epochs": epochs}
    if epochs == 0:
        return CheckResult(name, False, f"a rank consumed fewer than {share} samples of {wl.dataset!r}, "
                           "less than one epoch's share", evidence)
    for e in range(epochs):
        chunk = {r: s[e * share:(e + 1) * share] for r, s in seqs.items()}
        counts = Counter(i for c in chunk.values() for i in c)
        missing = sorted(set(range(n)) - set(counts))
        dups = sorted(i for i, c in counts.items() if c > 1)
        extra = sum(c - 1 for c in counts.values())
        if missing or extra > spec.padding:
            evidence.update(epoch=e, missing=len(missing), duplicated=len(dups))
            detail = []
            if dups:
                i = dups[0]
                who = sorted(r for r, c in chunk.items() if i in c)
                detail.append(f"{len(dups)} indices were consumed more than once (index {i} by ranks "
                              f"{', '.join(map(str, who))}; duplicates: {ranges(dups)})")
            if missing:
                detail.append(f"{len(missing)} of {n} indices were never consumed ({ranges(missing)})")
            return CheckResult(name, False, f"epoch {e}: " + "; ".join(detail), evidence)
    for r, s in seqs.items():
        for e in range(epochs - 1):
            frac = same_order_fraction(s[e * share:(e + 1) * share], s[(e + 1) * share:(e + 2) * share])
            if frac >= SAME_ORDER_FRACTION:
                evidence.update(rank=r, epochs_compared=[e, e + 1], same_order_fraction=round(frac, 3))
                return CheckResult(name, False, f"rank {r} consumed epochs {e} and {e + 1} in the same order "
                                   f"({frac:.0%} of indices within {ORDER_WINDOW} positions)", evidence)
    if spec.resume:
        return _resume(spec, ctx, seqs, evidence)
    after = "" if ev.status == "ok" else f" (every step was made; the job then ended with status {ev.status})"
    return CheckResult(name, True, f"{epochs} epochs: each a partition of the {n} samples across {w} ranks, "
                       f"in a new order each epoch{after}", evidence)


def _read_to_skip(ev: RunEvidence, r: int, ds: str, full: list[int], k: int, tol: int = 0, per_step: int = 0) -> int:
    """How many samples a restart read and discarded to reach its resume point, as HF accelerate's
    ``skip_first_batches`` does, or 0: its reads begin with the stretch of the uninterrupted sequence
    that ends where the job resumed, all of it read before the restart's first optimizer step, and
    go on with exactly what an uninterrupted run consumes from there (in order up to ``tol``). With
    no read-ahead, "before the first step" is the ledger's ``s`` (0 for the discarded reads and the
    first step's batch); a loader worker's ``s`` is the step it was forked at, so with read-ahead
    it is the parent's receive times: the discarded reads and the first step's batch received
    before the first step's record. A replay shorter than the loader's prefetch reads the same
    way; that nothing of it was trained on is the trajectory's to prove, step by step."""
    recs = [x for x in ev.ledgers.get(r, []) if x.get("ds") == ds and x.get("a") == 1]
    a1 = [x["i"] for x in recs]
    n = len(a1) - (len(full) - k)
    if n <= 0 or n > k or not _same_stretch(a1, full, k - n, len(full), tol):
        return 0
    if tol == 0:  # the first step's batch is read before it too: a replayed one would look the same
        return n if all(int(x.get("s", 0)) == 0 for x in recs[:n + per_step]) else 0
    first = next((e for e in ev.events(r) if e.get("kind") == "step" and int(e.get("attempt", 0)) == 1), None)
    at = step_time(first)
    if at is None or not all(isinstance(x.get("rt"), (int, float)) for x in recs):
        return 0
    before = sum(1 for x in recs if x["rt"] <= at)
    return n if before >= n + per_step else 0


def _excess(got: list[int], want: list[int]) -> Iterator[int]:
    """Per prefix length j (1, 2, ...), how many samples ``got[:j]`` holds beyond ``want[:j]``
    (as multisets)."""
    bal: Counter[int] = Counter()
    excess = 0
    for j in range(max(len(got), len(want))):
        if j < len(got):
            bal[got[j]] += 1
            excess += bal[got[j]] > 0
        if j < len(want):
            bal[want[j]] -= 1
            excess -= bal[want[j]] >= 0
        yield excess


def drift(got: list[int], want: list[int]) -> int:
    """The most samples any prefix of ``got`` holds beyond the same-length prefix of ``want``: 0
    for equal sequences, small for one whose order only jitters locally (loader workers'
    interleaved reads), large for one that replays or skips a stretch."""
    return max(_excess(got, want), default=0)


def order_tolerance(runs: list[RunEvidence], r: int, ds: str, per_step: int) -> int:
    """Positions rank ``r``'s ledger may stray from another run's order: in each of the two runs
    compared, its read-ahead (the most it read beyond what its steps had consumed, in any of
    ``runs``' first attempts) plus one step's batch, which may be read between two step records.
    0 where nothing was read ahead (or the records cannot tell: no receive times): then exactly."""
    ahead = max((ra["ahead"] for ev in runs if (ra := read_ahead(ev, r, ds, per_step)) is not None), default=0)
    return 2 * (math.ceil(ahead) + per_step) if ahead > 0 else 0


def _same_stretch(got: list[int], want: list[int], start: int, stop: int, tol: int) -> bool:
    """Whether ``got`` is what an uninterrupted run read from position ``start`` to ``stop`` of
    ``want``: as many reads, in the same order up to ``tol`` positions of jitter. With jitter, a cut
    inside a ledger is fuzzy too: samples may cross it by up to ``tol`` positions (a worker's batch
    of the next step received before the last of this step's), so the samples ``got`` has and the
    stretch lacks must lie within ``tol`` outside a cut, and those it lacks within ``tol`` inside."""
    stretch = want[start:stop]
    if tol == 0 or len(got) != len(stretch):
        return got == stretch
    extra, missing = Counter(got) - Counter(stretch), Counter(stretch) - Counter(got)
    outside = Counter(want[max(0, start - tol):start] + want[stop:stop + tol])
    inside = Counter((want[start:start + tol] if start else []) + (want[max(start, stop - tol):stop] if stop < len(want) else []))
    return (not extra - outside and not missing - inside and extra.total() <= tol
            and drift(got, stretch) <= tol)


def _first_divergence(got: list[int], want: list[int], tol: int) -> int:
    """The first position where ``got`` leaves ``want`` by more than ``tol`` (or runs out)."""
    n = min(len(got), len(want))
    return next((j for j, e in enumerate(_excess(got[:n], want[:n])) if e > tol), n)


def _resume(spec: Spec, ctx: Context, uninterrupted: dict[int, list[int]], evidence: dict[str, Any]) -> CheckResult:
    """Across a kill and restart, the ranks must consume what an uninterrupted run consumes: attempt
    0 up to the step the job resumed from, then attempt 1 to the end, nothing replayed or skipped.
    The resume step comes from parameter fingerprints, not from anything the script says."""
    name = "sample_partition"
    ev = need(ctx, name, "resume")
    if isinstance(ev, CheckResult):
        ev.message = "after a restart: " + ev.message
        return ev
    main = ctx.runs["main"]
    ds = ctx.manifest.workload.dataset
    attempts = max((o.attempts for o in ev.ranks.values()), default=0)
    evidence["resume_attempts"] = attempts
    if attempts < 2:
        return CheckResult(name, False, f"rank {spec.kill_rank} was to be killed after step {spec.kill_step}, "
                           "but the job never restarted (it made fewer steps?)", evidence)
    for r, full in uninterrupted.items():
        steps = main.ranks[r].steps
        per_step = len(full) // steps if steps else 0
        c = resume_point(ev, r)
        a1 = ev.samples(r, ds, attempt=1)
        info = evidence.setdefault("resume", {})
        info[r] = {"resumed_from_step": c, "attempt1_samples": len(a1), "samples_per_step": per_step}
        if c is None:
            return CheckResult(name, False, f"after the restart rank {r} started from parameters the job never "
                               "had before the kill (not the initial ones, nor those after any step)", evidence)
        k = c * per_step
        tol = order_tolerance([main, ev], r, ds, per_step)
        if tol:
            info[r]["order_tolerance"] = tol
            info[r]["order_drift"] = drift(a1, full[k:])
        if tol == 0:
            a0 = [x["i"] for x in ev.ledgers.get(r, []) if x.get("ds") == ds and x.get("a") == 0 and x.get("s", 0) < c]
        else:  # a worker's ``s`` is the step it was forked at: the first c steps' worth of reads instead
            a0 = ev.samples(r, ds, attempt=0)[:k]
        if not _same_stretch(a0, full, 0, k, tol):
            return CheckResult(name, False, f"before the kill rank {r} consumed something other than an "
                               f"uninterrupted run in its first {c} steps", evidence)
        if _same_stretch(a1, full, k, len(full), tol):
            continue
        skipped = _read_to_skip(ev, r, ds, full, k, tol, per_step)
        if skipped:  # fast-forwarded by reading and discarding; that nothing of it was trained on is
            info[r]["read_and_discarded"] = skipped  # the trajectory's to prove, step by step
            continue
        j = _first_divergence(a1, full[k:], tol)
        # trained on before the kill: what its steps consumed; reads past the last step were read ahead
        made = sum(1 for e in ev.events(r) if e.get("kind") == "step" and int(e.get("attempt", 0)) == 0)
        seen = set(ev.samples(r, ds, attempt=0)[:made * per_step])
        replayed = [i for i in a1[j:j + per_step] if i in seen]
        if replayed and len(a1) > len(full) - k:
            detail = (f"its samples from there ({ranges(a1[j:j + 8])}, ...) had already been consumed and "
                      f"trained on before the kill; {len(a1) - (len(full) - k)} samples were replayed")
        elif len(a1) < len(full) - k:
            detail = f"it consumed {len(a1)} samples, where an uninterrupted run consumes {len(full) - k}: samples were skipped"
        else:
            detail = (f"it consumed {ranges(a1[j:j + 8])} where an uninterrupted run consumes "
                      f"{ranges(full[k + j:k + j + 8])}")
        return CheckResult(name, False, f"the job resumed from the state after step {c}, but rank {r} did not "
                           f"continue the uninterrupted sequence {j} samples into the restart: {detail}", evidence)
    tols = [i["order_tolerance"] for i in evidence.get("resume", {}).values() if i.get("order_tolerance")]
    jitter = (f" (the same samples, in its order within {max(tols)} positions: the loader read ahead of the steps)"
              if tols else "")
    return CheckResult(name, True, "every epoch partitions the dataset in a new order, and after a kill and "
                       f"restart every rank consumed exactly what an uninterrupted run consumes{jitter}", evidence)


CHECK = Check("sample_partition", Spec, judge, runs=runs,
              property='every epoch each sample is read once across ranks, in a new order, and a restart reads exactly what an uninterrupted run reads')
