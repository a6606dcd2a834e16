"""memory_flat: memory stays flat, judged from more than one signal, so that offsetting one of them
(a pre-allocated balloon released as a leak grows keeps the RSS slope flat) does not hide a leak:

- the slope of memory per step after warm-up (CUDA allocated where present, else RSS: in a
  sandboxed run the memory of the rank's process tree, the rank and its DataLoader workers,
  sampled by the parent from outside and aligned to the steps by the parent's receive times,
  ``grader.evidence.memory``; a script that patches what the rank reports of itself changes
  nothing). Where the tree's set of processes changed after warm-up (workers started for an
  evaluation, or ended), the slope is the one within each set (least squares with a level of its
  own per set): a worker's start-up moves the level once and is not a leak, while memory that
  grows within the sets (in the rank, or in a persistent worker) still shows. Within each set, the
  one interval between two of the parent's samples where memory rose most is a level change too
  (``Series.without_largest_rise``): the samples come every few tenths of a second, a fast job
  makes 20-30 steps between two, and a one-time allocation there (a persistent worker's first
  evaluation: 17 MB, memory-leak's all-rewrites in CI) interpolated over them read +0.134 MB per
  step. Memory that grows steadily keeps its slope on both sides of the cut;
- the level: the median after warm-up against the reference run's (a balloon that offsets a
  leak must start high);
- where the step records carry them (``harness/memstats.py``: every few steps), two signals a
  process cannot offset by giving bytes back: the autograd graph nodes the rank holds (a kept graph
  pins its saved activations whatever RSS does): their slope per step (least squares over the
  counted steps after warm-up) and, with ``max_level_over_reference``, their level against the
  reference run's (a bounded history of graphs is flat after warm-up but holds several graphs where
  the fix holds one); and the bytes of the live tensors' storages, each storage once: their slope
  against the same MB-per-step threshold as RSS and their level against the reference's (a pile of
  tensors released as a leak grows must start high). The live tensors' count is evidence only: a few
  kept 0-dim tensors (a history of scalars) grow it by a step's fraction while no memory to speak of
  is retained. A rank that froze objects out of the collector's sight after the harness began
  counting (``gc_refrozen``) fails: its counts would not see them.

A rank that held its step records back and sent them later (in one burst at the end: the steps then
fall between two of the parent's samples, and the series would be what the rank reported) fails:
a record of a later step reached the parent long before them (``grader.checks._held``), or its step
records reached the parent on less of its CPU than the steps need, or (where no sample of the
parent's falls among them) all within a tenth of the time the reference run's took. Where no sample
falls among its steps, the rank's own reports are the series only if they agree with the parent's
samples at the same moments (the ``disagree`` flag's rule, ``grader.crosscheck.memory_off``: honest
reports sit within 0.73 MB of the samples in the median, the rule's floor is 10 MB).
What still passes: a rank that holds every record, then after training releases them at the
reference's own pace, each re-stamped with its memory at the time, spinning its CPU; the samples
then placed on its steps are its memory after training. The level against the reference's
(``max_level_over_reference``) still sees a leak that grew it; a leak too small to move the level
is not seen."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from grader.checks._held import against_reference, held_back
from grader.checks.base import Check, CheckResult, CheckSpec, Context, need
from grader.evidence.memory import REPORTED, Series, rank_series

if TYPE_CHECKING:
    from grader.evidence import RunEvidence

MIN_POINTS = 20  # fewer steps than this after warm-up cannot tell a leak from noise
MIN_COUNTS = 8  # counted steps after warm-up needed to judge the counts (they are not noisy)


def slope(ys: list[float]) -> float:
    """Least-squares slope per step."""
    n = len(ys)
    mx = (n - 1) / 2
    my = sum(ys) / n
    num = sum((i - mx) * (y - my) for i, y in enumerate(ys))
    den = sum((i - mx) ** 2 for i in range(n))
    return num / den if den else 0.0


class Spec(CheckSpec):
    name: Literal["memory_flat"]
    warmup_steps: int = Field(10, ge=0)
    max_slope_mb_per_step: float = Field(0.05, gt=0)
    # the median after warm-up may be at most this many times the reference run's, plus the slack
    max_level_over_reference: float | None = Field(None, gt=1.0)
    level_slack_mb: float = Field(64.0, ge=0)
    # autograd graph nodes counted per step may grow at most this much per step
    max_node_slope: float = Field(0.2, gt=0)
    # with max_level_over_reference: their median may exceed the reference's times that factor by this
    # (a graph of the exercises' models is 10-40 nodes: one more graph kept than the fix keeps fails)
    node_level_slack: float = Field(24.0, ge=0)


def pooled_slope(groups: list[list[tuple[int, float]]]) -> tuple[float, int] | None:
    """The least-squares slope with a level of its own per group (of (x, y) pairs), and the points
    it is drawn through (groups of one point say nothing of a slope); None without two such points."""
    num = den = 0.0
    n = 0
    for g in groups:
        if len(g) < 2:
            continue
        mx = sum(x for x, _ in g) / len(g)
        my = sum(y for _, y in g) / len(g)
        num += sum((x - mx) * (y - my) for x, y in g)
        den += sum((x - mx) ** 2 for x, _ in g)
        n += len(g)
    return (num / den, n) if den else None


def _slope(series: Series, warmup: int) -> tuple[float, int, int]:
    """The series' slope per step after warm-up, how many steps it is drawn through, and over how
    many sets of processes (1: the plain least-squares line). Within the sets where the tree changed,
    when they hold at least ``MIN_POINTS`` steps; else the plain line, which a level that moved
    only raises."""
    ys = series.after(warmup, MIN_POINTS)
    groups = series.groups(warmup, MIN_POINTS)
    if series.knots:  # outside samples: each set's one largest rise between two samples is a level change
        lo, _ = series.span(warmup, MIN_POINTS)
        sets = groups or [[(lo + i, y) for i, y in enumerate(ys)]]
        pieces = [p for g in sets for p in series.without_largest_rise(g)]
        pooled = pooled_slope(pieces)
        if pooled is not None and pooled[1] >= MIN_POINTS:
            return pooled[0], pooled[1], sum(1 for g in sets if len(g) >= 2)
    if groups:
        pooled = pooled_slope(groups)
        if pooled is not None and pooled[1] >= MIN_POINTS:
            return pooled[0], pooled[1], sum(1 for g in groups if len(g) >= 2)
    return slope(ys), len(ys), 1


def _counts(ev: RunEvidence, rank: int, field: str, warmup: int) -> list[tuple[int, float]]:
    """(step, count) of the rank's last attempt after warm-up, for the steps that were counted."""
    last = max((int(e.get("attempt", 0)) for e in ev.events(rank) if e.get("kind") == "step"), default=0)
    return [(int(e["step"]), float(e[field])) for e in ev.events(rank)
            if e.get("kind") == "step" and int(e.get("attempt", 0)) == last and field in e
            and int(e["step"]) > warmup]


def slope_xy(pts: list[tuple[int, float]]) -> float:
    """Least-squares slope of y over x."""
    n = len(pts)
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    den = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / den if den else 0.0


@dataclass(frozen=True)
class Counted:
    per_rank: dict[int, dict[str, Any]]  # evidence per rank: slope, start, end, median, counted steps
    grew: tuple[int, float, list[tuple[int, float]]] | None  # the first rank over its slope: rank, slope, points


def _judge_series(ev: RunEvidence, warmup: int, field: str, scale: float, max_slope: float) -> Counted:
    """A counted field's slope per step and median on each rank that has enough counted steps."""
    per_rank, grew = {}, None
    for r in sorted(ev.ranks):
        pts = [(s, y * scale) for s, y in _counts(ev, r, field, warmup)]
        if len(pts) < MIN_COUNTS:
            continue
        k = slope_xy(pts)
        per_rank[r] = {"slope_per_step": round(k, 6), "start": round(pts[0][1], 3), "end": round(pts[-1][1], 3),
                       "counted_steps": len(pts), "median": round(_median([y for _, y in pts]), 3)}
        if k > max_slope and grew is None:
            grew = (r, k, pts)
    return Counted(per_rank, grew)


def _medians(ev: RunEvidence, warmup: int, field: str, scale: float = 1.0) -> dict[int, float]:
    """Each rank's median of a counted field after warm-up, where it was counted."""
    out = {}
    for r in sorted(ev.ranks):
        ys = [y * scale for _, y in _counts(ev, r, field, warmup)]
        if ys:
            out[r] = _median(ys)
    return out


def _refrozen(ev: RunEvidence) -> tuple[int, int] | None:
    for r in sorted(ev.ranks):
        for e in ev.events(r):
            if e.get("kind") == "step" and e.get("gc_refrozen"):
                return r, int(e["step"])
    return None


def _median(xs: list[float]) -> float:
    ys = sorted(xs)
    return ys[len(ys) // 2] if ys else 0.0


def _level(ev: RunEvidence, warmup: int) -> tuple[float, str]:
    """The highest per-rank median after warm-up, and what it measures."""
    best, what = 0.0, "RSS"
    for r in ev.ranks:
        series = rank_series(ev, r)
        m = _median(series.values[warmup:])
        if m >= best:
            best, what = m, series.what
    return best, what


def _reports_off(ev: RunEvidence, rank: int) -> tuple[float, int, float] | None:
    """Where the rank's reports of its memory disagree with the parent's samples of it (the
    ``disagree`` flag's rule, ``grader.crosscheck.memory_off``), over its last attempt."""
    from grader.crosscheck import memory_off

    steps = [e for e in ev.events(rank) if e.get("kind") == "step"]
    last = max((int(e.get("attempt", 0)) for e in steps), default=0)
    return memory_off([e for e in steps if int(e.get("attempt", 0)) == last],
                      [s for s in ev.proc_samples(rank) if s.get("a") == last])


def judge(spec: Spec, ctx: Context) -> CheckResult:
    """Every signal is judged, and every one that fails is named (a balloon that flattens the RSS
    slope still fails on the counts and on the level, and the message says both)."""
    ev = need(ctx, "memory_flat", "main", ok_only=False)
    if isinstance(ev, CheckResult):
        return ev
    per_rank: dict[int, dict[str, Any]] = {}
    worst: int | None = None
    reference = ctx.runs.get("reference")
    for r in sorted(ev.ranks):
        series = rank_series(ev, r)
        held = held_back(ev, r) if not ev.ranks[r].cuda_alloc_mb else None
        fallback = series.what == REPORTED and ev.sandboxed  # no sample of the parent's among its steps
        if held is None and fallback:  # a burst?
            held = against_reference(ev, reference, r)
        off = _reports_off(ev, r) if held is None and fallback else None
        if off is not None:  # the fallback is the rank's reports: only where they agree with the samples
            return CheckResult("memory_flat", False, f"no sample of the parent's lies among rank {r}'s steps by when "
                               f"their records arrived, and what it reported of its memory is {abs(off[0]):.0f} MB "
                               f"{'below' if off[0] < 0 else 'above'} what the parent sampled of it at the same "
                               f"moments (median over {off[1]} steps): its step records do not describe the steps it "
                               "ran, so its memory per step can be measured neither from outside nor by them",
                               {"reports_off_mb": round(off[0], 1), "rank": r})
        if held is not None:
            return CheckResult("memory_flat", False, f"{held.sentence()}: the parent's memory samples cannot be placed "
                               "on its steps by when their records arrived, so its memory per step cannot be measured "
                               f"from outside (measured so, it would read {series.what})",
                               {"held_back": {"rank": r, "step": held.step, "lag_s": held.lag_s, "records": held.held}})
        if len(series.values) < spec.warmup_steps + MIN_POINTS:
            return CheckResult("memory_flat", False,
                               f"rank {r} made {len(series.values)} steps; at least {spec.warmup_steps + MIN_POINTS} "
                               "are needed to measure memory growth", {"steps": len(series.values)})
        ys = series.after(spec.warmup_steps, MIN_POINTS)
        s, n, sets = _slope(series, spec.warmup_steps)
        per_rank[r] = {"slope_mb_per_step": round(s, 5), "start_mb": round(ys[0], 1),
                       "end_mb": round(ys[-1], 1), "steps": n, "measure": series.what,
                       "outside": series.outside}
        if sets > 1:
            per_rank[r]["process_sets"] = sets
        if worst is None or s > per_rank[worst]["slope_mb_per_step"]:
            worst = r
    assert worst is not None  # need() refused a run without ranks (harness_failed), and each rank sets it
    w = per_rank[worst]
    evidence: dict[str, Any] = {"threshold_mb_per_step": spec.max_slope_mb_per_step, "ranks": per_rank}
    within = (f", within each of the {w['process_sets']} sets of processes it ran (DataLoader workers started or "
              "ended between them)" if w.get("process_sets") else "")
    detail = (f"rank {worst}'s {w['measure']} changed {w['slope_mb_per_step']:+.3f} MB per step over "
              f"{w['steps']} steps after warm-up ({w['start_mb']:.0f} → {w['end_mb']:.0f} MB){within}; "
              f"threshold {spec.max_slope_mb_per_step} MB per step")
    problems: list[str] = []
    if w["slope_mb_per_step"] > spec.max_slope_mb_per_step:
        problems.append(detail)
    frozen = _refrozen(ev)
    if frozen:
        problems.append(f"rank {frozen[0]} moved objects out of the garbage collector's sight (gc.freeze) after the "
                        f"harness began counting its live tensors (seen at step {frozen[1]}), so what it holds "
                        "cannot be counted")
    nodes = _judge_series(ev, spec.warmup_steps, "graph_nodes", 1.0, spec.max_node_slope)
    mbytes = _judge_series(ev, spec.warmup_steps, "live_bytes", 2.0 ** -20, spec.max_slope_mb_per_step)
    evidence.update(graph_nodes=nodes.per_rank, live_mb=mbytes.per_rank,
                    live_tensors=_medians(ev, spec.warmup_steps, "live_tensors"))
    if nodes.grew:
        r, k, pts = nodes.grew
        problems.append(f"the autograd graph nodes rank {r} holds grew by {k:.2f} per step from step {pts[0][0]} to "
                        f"step {pts[-1][0]} ({pts[0][1]:.0f} → {pts[-1][1]:.0f}, counted at {len(pts)} steps after "
                        f"warm-up), while its memory slope read {w['slope_mb_per_step']:+.3f} MB per step")
    if mbytes.grew:
        r, k, pts = mbytes.grew
        problems.append(f"the live tensors rank {r} holds grew by {k:+.3f} MB per step from step {pts[0][0]} to step "
                        f"{pts[-1][0]} ({pts[0][1]:.1f} → {pts[-1][1]:.1f} MB, counted at {len(pts)} steps after "
                        f"warm-up); threshold {spec.max_slope_mb_per_step} MB per step")
    if spec.max_level_over_reference:
        ref = need(ctx, "memory_flat", "reference")
        if isinstance(ref, CheckResult):
            return ref
        level, what = _level(ev, spec.warmup_steps)
        ref_level, _ = _level(ref, spec.warmup_steps)
        allowed = ref_level * spec.max_level_over_reference + spec.level_slack_mb
        evidence.update(level_mb=round(level, 1),
                        level_over_reference=round(level / ref_level, 2) if ref_level else None,
                        max_level_over_reference=spec.max_level_over_reference, level_slack_mb=spec.level_slack_mb)
        if level > allowed:
            problems.append(f"{what} held at a median of {level:.0f} MB after warm-up, {level / ref_level:.1f}x the "
                            f"reference run's level (at most {spec.max_level_over_reference:g}x plus "
                            f"{spec.level_slack_mb:g} MB): far higher than the work needs")
        for mine, field, scale, slack, label, fmt in (
                (nodes, "graph_nodes", 1.0, spec.node_level_slack, "autograd graph nodes", ".0f"),
                (mbytes, "live_bytes", 2.0 ** -20, spec.level_slack_mb, "MB of live tensors", ".1f")):
            ref_top = max(_medians(ref, spec.warmup_steps, field, scale).values(), default=None)
            if not mine.per_rank or ref_top is None:
                continue  # not counted (a run too short, or a reference recorded before the field existed)
            r, m = max(((r, v["median"]) for r, v in mine.per_rank.items()), key=lambda kv: kv[1])
            allowed = ref_top * spec.max_level_over_reference + slack
            evidence.setdefault("count_levels", {})[field] = {
                "median": m, "allowed": round(allowed, 3),
                "over_reference": round(m / ref_top, 2) if ref_top else None}
            if m > allowed:
                times = f"{m / ref_top:.1f}x the reference run's level" if ref_top else "where the reference run held none"
                problems.append(f"rank {r} held a median of {m:{fmt}} {label} after warm-up, {times} (at most "
                                f"{spec.max_level_over_reference:g}x plus {slack:g}): far more than the work needs")
    if problems:
        return CheckResult("memory_flat", False, "; ".join(problems), evidence)
    return CheckResult("memory_flat", True, detail, evidence)


CHECK = Check("memory_flat", Spec, judge, needs_reference=lambda spec: bool(spec.max_level_over_reference),
              property="memory of every rank's process tree stays flat over the steps, at the level a correct run holds")
