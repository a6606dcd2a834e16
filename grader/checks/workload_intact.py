"""workload_intact: the run did the work the manifest says, with the kit's files as shipped.

Everything here comes from the harness's records: steps from the optimizer hook, samples from the
datasets' ledger, the parameter count from the saved final parameters, the world size from the
launcher. A submission cannot pass by printing, by shrinking the run, or by writing records itself.

The workload is judged in samples, never in calls: gradient accumulation, micro-batches,
``no_sync``, DataLoader workers (persistent or not, any number, in training or in evaluation) are
valid wherever the update is the same. So, in every run of the grading (the main run, other world
sizes, killed and restarted runs; ``grader/evidence/work.py``, ``harness/work.py``):

- samples per optimizer step: no step may train on more than the effective batch per rank
  (ceil(global_batch / world size): the rows of the forward passes its backward passes reached,
  each counted once however many micro-batches they came in). Training the optimizer step hook
  never saw (a restart that retrains from scratch up to its checkpoint with hidden updates) shows
  here. Where a backward pass reached no forward call the harness counts (a loss computed without
  calling a module), its samples cannot be counted, and the step is judged by backward passes as
  before: no more than the workload's ``backward_per_step``. And the median step may not train on
  fewer than that batch (a batch that shrank: half of each batch read, the other half dropped);
- micro-batches: where the workload declares them (``backward_per_step`` > 1: the brief keeps the
  accumulation because the real job's micro-batch is what fits), the median step's largest
  backpropagated forward pass may hold no more than the micro-batch (global_batch / (world size x
  backward_per_step) rows): folding them into larger batches changes the job, splitting them
  further does not;
- no step may run no backward pass (a step record that trained nothing: the step hook called by
  the script itself);
- rows fed to the model: the rows its outermost forward calls were given may not exceed, at any
  step, the samples the rank had read through the kit's datasets (the ledger), beyond the rows of
  one step: a rank that computes on samples it never read (its peer's half of the batch, taken
  from the dataset's tensors) fails;
- optimizer steps: every rank makes the workload's ``steps``; where the workload names
  ``skippable_steps`` (a step whose batch holds a corrupt record may be skipped on every rank),
  down to ``steps - skippable_steps``, the skipped batches still read (an iteration that ran its
  backward pass and skipped ``optimizer.step()`` leaves its samples to the next step record: a
  step of k + 1 whole batches spans k skipped iterations, within the same allowance);
- samples read: every sample of the training set, ``steps x global_batch`` reads in all (fewer
  is a shrunk workload, named by how many per step), and at most ``READ_AHEAD_SHARE`` of an
  epoch's share per rank beyond that (a loader's prefetch past the last step it feeds);
- evaluations: per evaluation split, the samples read across all ranks and their loader workers,
  a sample counted once per evaluation whichever rank or process read it
  (``grader.evidence.work.evaluation_reads``), must reach ``count x samples``; fewer names what
  shrank: skipped evaluations, or fewer samples scored;
- reads ahead of the steps: at no optimizer step of a run's first attempt may a rank have read
  more than half an epoch's share (``READ_AHEAD_SHARE`` of ceil(dataset_size / world size)
  samples) beyond what its steps had consumed (``grader/evidence/work.py``'s ``read_ahead``). A
  DataLoader's prefetch is a few batches (two workers of prefetch factor 2 on sampler-replay:
  0.125 of a share); features computed for every record up front and reused across epochs read
  the whole dataset before the first step (1.94 shares on slow-input-pipeline), and the steps then
  train on data no epoch read;
- autocast: where the workload names one (``autocast = "float16"``), every optimizer step of the
  main run must run a forward pass under it;
- compute dtype: where the workload names one (``compute_dtype = "bfloat16"``), most of the rows
  each optimizer step of the main run trained on must have gone through forward calls computing in
  it, by autocast or by weights cast to it (``harness/work.py``'s ``backward_compute``): the brief's
  memory budget, however a fix keeps the master weights; a bf16 module called beside an fp32 model
  on no rows, or outside the backward pass, trains nothing;
- records that contradict each other (``grader/evidence/timeline.py``): a save or an upload said
  to take longer than the wall time around it, a rank's clock behind the parent's.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

from grader.checks.base import Check, CheckResult, CheckSpec, Context, need, trained_to_the_end
from grader.evidence import harness_failed
from grader.evidence.timeline import contradictions
from grader.evidence.work import (
    dtype_misses,
    empty_steps,
    evaluation_reads,
    extra_training,
    median_backward,
    read_ahead,
    samples_per_step,
    skipped_at_overflow,
    unread_rows,
)
from grader.roles import Role

if TYPE_CHECKING:
    from grader.evidence import RunEvidence
    from grader.manifest import Evaluation, Workload

# How far, in epoch shares (ceil(dataset_size / world size) samples), a rank's reads may run ahead
# of what its optimizer steps consumed: prefetching batches is the input pipeline's job; reading
# (and featurising) the dataset ahead of the steps that train on it is not.
READ_AHEAD_SHARE = 0.5
# Reads of one evaluation sample by different ranks within this many optimizer steps of each other
# are one evaluation of it (every rank scoring the same batch); further apart, two (ranks taking
# turns). Measured, memory-leak's variants with the held-out batches read by loader workers (every
# rank reads every batch; persistent workers prefetch the split at once, per-pass ones at each pass;
# `trainwreck verify --variants memory-leak`, two passes, 2-core machine at load 4-5): one
# evaluation's reads on the two ranks lie a median of 0.10-0.31 steps apart, at most 0.57-1.62 in
# most runs and 3.83 in one (a worker scheduled some 50 ms late, 4 steps of 10-15 ms); read in the
# main process, at most 0.41-0.59. 8 leaves 2.1x over the worst. A pair further apart is counted as
# two evaluations, which errs toward passing (the shrunk evaluations measured read half of the
# workload's), never fails a valid run. Ranks that take turns scoring the same samples fewer than 8
# steps apart would count as one evaluation (no shipped brief has them).
EVAL_WINDOW_STEPS = 8.0

class Spec(CheckSpec):
    name: Literal["workload_intact"]


def _other_datasets(ev: Any, size: int) -> str:
    """Where a run read none of the training set: what its DataLoaders read instead, so that a
    dataset cut to another length is named, not only counted as nothing."""
    fetched = ev.loader_datasets()
    if not fetched:
        return ""
    seen = ", ".join(f"{ds} ({n} samples)" for ds, n in fetched.most_common(3))
    return f" (no DataLoader read a dataset of {size} samples; they read {seen})"


def judge(spec: Spec, ctx: Context) -> CheckResult:
    name = "workload_intact"
    problems: list[str] = []
    forged = {role: ev.forged for role, ev in ctx.runs.items() if ev.forged}
    if forged:
        role, count = next(iter(forged.items()))
        problems.append(f"{count} record lines in the {role} run dir were not written by the harness")
    if ctx.protected_changed:
        problems.append(f"protected files differ from the exercise's: {', '.join(ctx.protected_changed)}")
    ev = need(ctx, name, "main", ok_only=False)
    if isinstance(ev, CheckResult):
        return ev
    wl = ctx.manifest.workload
    w = ctx.manifest.world_size
    steps = {r: o.steps for r, o in ev.ranks.items()}
    samples = {r: len(ev.samples(r, wl.dataset)) for r in ev.ranks}
    distinct = len({i for r in ev.ranks for i in ev.samples(r, wl.dataset)})
    params = {r: o.n_params for r, o in ev.ranks.items()}
    evidence: dict[str, Any] = {"world_size": ev.world_size, "ranks_started": len(ev.ranks), "steps": steps,
                                "samples": samples, "distinct_samples": distinct, "params": params,
                                "forged_lines": forged, "protected_changed": ctx.protected_changed}
    if ev.adopted:  # its own datasets: what its DataLoaders fetched stands for the kit's ledger
        evidence["datasets_from_loaders"] = dict(ev.adopted)
    if ev.world_size != w or len(ev.ranks) != w:
        problems.append(f"the job ran {len(ev.ranks)} ranks (world size {ev.world_size}), the exercise runs {w}")
    # The process group the script actually built, from the bootstrap's record of init_process_group.
    groups = {r: next((e.get("world_size") for e in ev.events(r) if e.get("kind") == "pg_init"), None)
              for r in ev.ranks}
    evidence["process_group_world_size"] = groups
    odd = {r: g for r, g in groups.items() if g is not None and g != w}
    if odd:
        r, g = next(iter(odd.items()))
        problems.append(f"rank {r} initialised a process group of world size {g}; the exercise runs {w}")
    # A job that failed after every rank's last step (at a collective in the end-of-run path) did
    # all of its work, and the records show what: judge it; how it ended is `completes`' business.
    finished = ev.status == "ok" or trained_to_the_end(ev, wl.steps)
    killed: list[int] = []
    if finished and ev.status != "ok":
        killed = sorted(r for r, o in ev.ranks.items() if o.exit_code is None or not o.n_params)
        if killed:
            problems.append(f"rank {killed[0]} left no record of the parameters it trained (it was killed before "
                            "its exit record), so they cannot be counted")
    if finished:
        # an iteration the script's own loss scaler skipped at the injected overflow is an iteration
        per_step = getattr(wl, "backward_per_step", 1)
        share = math.ceil(wl.global_batch / max(ev.world_size, 1))
        skipped = {r: 1 for r in steps if skipped_at_overflow(ev, r, per_step, share) is not None}
        if skipped:
            evidence["skipped_at_overflow"] = sorted(skipped)
        fewest = wl.steps - wl.skippable_steps
        bad = {r: s for r, s in steps.items() if not fewest <= s + skipped.get(r, 0) <= wl.steps}
        if bad:
            r, s = next(iter(bad.items()))
            allowed = f" (at least {fewest}: {wl.skippable_steps} may be skipped)" if wl.skippable_steps else ""
            problems.append(f"rank {r} made {s} optimizer steps; the workload is {wl.steps}{allowed}")
        total = sum(samples.values())
        want = wl.steps * wl.global_batch
        # a loader's prefetch past the last step it feeds is read and never consumed
        spare = len(ev.ranks) * math.floor(READ_AHEAD_SHARE * math.ceil(wl.dataset_size / max(ev.world_size, 1)))
        evidence["samples_allowed"] = [want, want + spare]
        if not want <= total <= want + spare:
            per_step = total / max(sum(steps.values()) / max(len(steps), 1), 1)
            problems.append(f"the ranks consumed {total} samples in all, {per_step:g} per step; the workload is "
                            f"{wl.steps} steps of a global batch of {wl.global_batch} "
                            f"({want} samples{f', and a loader prefetching at most {spare} more' if total > want else ''})")
        if distinct != wl.dataset_size:
            others = "" if distinct else _other_datasets(ev, wl.dataset_size)
            problems.append(f"{distinct} distinct samples of {wl.dataset!r} were consumed; the dataset has "
                            f"{wl.dataset_size}{others}")
        for ds, evaluation in wl.evaluations.items():
            problem = _evaluations(ev, ds, evaluation, evidence)
            if problem:
                problems.append(problem)
        bad_p = {r: p for r, p in params.items() if p != wl.params and r not in killed}
        if bad_p:
            r, p = next(iter(bad_p.items()))
            problems.append(f"rank {r} trained {p} parameters; the model has {wl.params}")
    problems += _hidden_work(ctx, ev, evidence)
    if problems:
        return CheckResult(name, False, "; ".join(problems), evidence)
    if not finished:
        return CheckResult(name, False, f"{ev.describe()} did not complete, so the work done cannot be "
                           "checked", evidence)
    after = "" if ev.status == "ok" else f" (the job then ended with status {ev.status})"
    made = min(steps.values(), default=wl.steps)
    took = f"{made} steps ({wl.steps - made} of {wl.steps} skipped)" if made != wl.steps else f"{wl.steps} steps"
    return CheckResult(name, True, f"{w} ranks × {took}, {wl.steps * wl.global_batch} samples "
                       f"covering all {wl.dataset_size}, {wl.params} parameters, files as shipped{after}", evidence)


def _hidden_work(ctx: Context, main: RunEvidence, evidence: dict[str, Any]) -> list[str]:
    """Work done around the optimizer step hook and the datasets, and records that contradict each
    other, in every run of the submission (not the reference's)."""
    wl = ctx.manifest.workload
    problems: list[str] = []
    runs = {"main": main, **{n: e for n, e in ctx.runs.items() if n not in (Role.MAIN, Role.REFERENCE)}}
    for role, ev in runs.items():
        if harness_failed(ev):
            continue
        where = f"the {role} run"
        # the workload's count is for its world size; at another, the same global batch may take
        # more micro-batches per rank (world size 1 accumulating what two ranks computed)
        per_step = math.ceil(wl.backward_per_step * ctx.manifest.world_size / max(ev.world_size, 1))
        share = math.ceil(wl.global_batch / max(ev.world_size, 1))
        at = "" if ev.world_size == ctx.manifest.world_size else f" at world size {ev.world_size}"
        for r in sorted(ev.ranks):
            extra = extra_training(ev, r, share, per_step, wl.skippable_steps)
            if extra:
                evidence.setdefault("extra_training", {}).setdefault(role, {})[r] = extra
                attempt = f" of attempt {extra['attempt']}" if extra["attempt"] else ""
                if extra["by"] == "samples" and (extra["median"] or 0) > share:  # every step: a bigger batch
                    problems.append(f"rank {r} trained on a median of {extra['median']:g} samples per optimizer step"
                                    f"{attempt} in {where} (the rows of the forward passes its backward passes "
                                    f"reached); the workload's effective batch is {wl.global_batch} samples per step, "
                                    f"{share} per rank{at}: the batch grew")
                elif extra["by"] == "samples":
                    problems.append(f"rank {r} trained on {extra['samples']} samples at optimizer step {extra['step']}"
                                    f"{attempt} in {where} (the rows of the forward passes its backward passes "
                                    f"reached; {extra['steps_over']} of its {extra['steps']} steps trained on more "
                                    f"than {share}); the workload's effective batch is {wl.global_batch} samples per "
                                    f"step, {share} per rank{at}: training the optimizer step hook never saw")
                else:
                    problems.append(f"rank {r} ran {extra['backward_passes']} backward passes for optimizer step "
                                    f"{extra['step']}{attempt} in {where} ({extra['steps_over']} of its "
                                    f"{extra['steps']} steps ran more than {per_step}, through no forward pass whose "
                                    f"samples could be counted); the workload runs {per_step} per optimizer step"
                                    f"{at}: training the optimizer step hook never saw")
                break
        for r in sorted(ev.ranks):
            empty = empty_steps(ev, r)
            if empty:
                evidence.setdefault("empty_steps", {}).setdefault(role, {})[r] = empty
                attempt = f" of attempt {empty['attempt']}" if empty["attempt"] else ""
                problems.append(f"rank {r} recorded {empty['empty']} of its {empty['steps']} optimizer steps{attempt} in "
                                f"{where} with no backward pass (first at step {empty['step']}): steps that trained "
                                "nothing")
                break
        declared = getattr(wl, "backward_per_step", 1)
        micro = wl.global_batch / (ctx.manifest.world_size * declared)
        for r in sorted(ev.ranks):
            got = samples_per_step(ev, r)
            if got is None:  # samples not countable (an older harness, or a loss no module call made)
                med = median_backward(ev, r) if declared > 1 and ev.world_size == ctx.manifest.world_size else None
                if med is not None and med < declared:
                    evidence.setdefault("fewer_backward", {}).setdefault(role, {})[r] = med
                    problems.append(f"rank {r} ran {med:g} backward passes per optimizer step (median) in {where}; "
                                    f"the workload accumulates {declared} micro-batches per step: folding them into "
                                    "fewer, larger batches changes the job")
                    break
                continue
            evidence.setdefault("samples_per_step", {}).setdefault(role, {})[r] = got
            if got["samples"] < share:
                problems.append(f"rank {r} trained on a median of {got['samples']:g} samples per optimizer step in "
                                f"{where} (the rows of the forward passes its backward passes reached); the "
                                f"workload's effective batch is {wl.global_batch} per step, {share} per rank{at}: "
                                "the batch shrank")
                break
            if declared > 1 and got["micro_batch"] > micro:
                problems.append(f"rank {r} backpropagated forward passes of {got['micro_batch']:g} samples (the median "
                                f"step's largest) in {where}; the workload accumulates micro-batches of {micro:g} "
                                f"({declared} per optimizer step at world size {ctx.manifest.world_size}): folding "
                                "them into fewer, larger batches changes the job")
                break
        for r in sorted(ev.ranks):
            unread = unread_rows(ev, r)
            if unread:
                evidence.setdefault("unread_rows", {}).setdefault(role, {})[r] = unread
                at = f"by optimizer step {unread['step']}" if unread["step"] is not None else "by the end of the run"
                problems.append(f"rank {r}'s model was fed {unread['rows_fed']} rows {at} in {where}, but the rank "
                                f"had read {unread['samples_read']} samples through {_via(ev)}: it computed "
                                "on samples it never read")
                break
        problem = _read_ahead(ev, wl, where, role, evidence)
        if problem:
            problems.append(problem)
        for c in contradictions(ev):
            evidence.setdefault("contradictions", {}).setdefault(role, []).append(c)
        if evidence.get("contradictions", {}).get(role):
            first = evidence["contradictions"][role][0]
            problems.append(f"records of {where} contradict each other: {first['what']}")
    for field, dtype in (("autocast", wl.autocast), ("compute", wl.compute_dtype)):
        if not dtype:
            continue
        for r in sorted(main.ranks):
            miss = dtype_misses(main, r, dtype, field)
            if miss:
                evidence.setdefault(field, {})[r] = miss
                seen = ", ".join(f"{k} x{v}" for k, v in sorted(miss["seen"].items(), key=lambda kv: -kv[1]))
                if field == "autocast":
                    problems.append(f"rank {r}'s forward passes ran without {dtype} autocast at {miss['steps_without']} "
                                    f"of its {miss['steps']} optimizer steps (first at step {miss['first_step']}; "
                                    f"forward calls by autocast dtype: {seen}); the workload trains under {dtype} "
                                    "autocast")
                else:
                    problems.append(f"rank {r} trained mostly outside {dtype} at {miss['steps_without']} of its "
                                    f"{miss['steps']} optimizer steps (first at step {miss['first_step']}; trained "
                                    f"rows, else forward calls, by compute dtype: {seen}); the workload's forward "
                                    f"passes compute in {dtype} (autocast or {dtype} weights)")
                break
    return problems


def _read_ahead(ev: RunEvidence, wl: Workload, where: str, role: str, evidence: dict[str, Any]) -> str | None:
    """The first rank whose reads of the training set ran more than ``READ_AHEAD_SHARE`` of an
    epoch's share ahead of its optimizer steps, as the problem's text; every rank's figure is kept."""
    w = max(ev.world_size, 1)
    share = math.ceil(wl.dataset_size / w)
    found = None
    for r in sorted(ev.ranks):
        ra = read_ahead(ev, r, wl.dataset, wl.global_batch / w)
        if ra is None:
            continue
        ra["shares"] = round(ra["ahead"] / share, 3)
        evidence.setdefault("read_ahead", {}).setdefault(role, {})[r] = ra
        if found is None and ra["shares"] > READ_AHEAD_SHARE:
            found = (f"rank {r} had read {ra['read']} samples of {wl.dataset!r} by optimizer step {ra['step']} in "
                     f"{where}, where its steps had consumed {ra['consumed']:g}: {ra['shares']:.2f} epoch shares "
                     f"({share} samples each) ahead of its steps, more than {READ_AHEAD_SHARE:g}; each epoch must "
                     f"read what it trains on through {_via(ev)} as it trains (a loader's prefetch is a few "
                     "batches), not read and featurise the dataset up front and reuse it")
    return found


def _via(ev: RunEvidence) -> str:
    """Where the run's reads were seen: the kit's datasets, or its own DataLoaders' fetches."""
    return "its DataLoaders" if ev.adopted else "the kit's datasets"


def _evaluations(ev: RunEvidence, ds: str, want: Evaluation, evidence: dict[str, Any]) -> str | None:
    """The evaluations on dataset ``ds``, judged by what all ranks and their loader workers read:
    ``count`` evaluations of ``samples`` distinct samples each, a sample counted once per evaluation
    whichever rank or process read it (``evaluation_reads``)."""
    got = evaluation_reads(ev, ds, want.count, EVAL_WINDOW_STEPS)
    need_slots = want.count * want.samples
    evidence.setdefault("evaluations", {})[ds] = {**got, "needed": need_slots,
                                                  "evaluations_worth": round(got["slots"] / want.samples, 2)}
    if not got["slots"]:
        return f"no rank read {ds!r}: 0 evaluations were made; the workload makes {want.count}"
    if got["distinct"] < want.samples:
        return (f"only {got['distinct']} distinct samples of {ds!r} were read over the whole run, by all ranks; "
                f"each evaluation of the workload reads {want.samples}")
    if got["slots"] < need_slots:
        return (f"the ranks read {got['slots']} samples of {ds!r} over the run (a sample counted once per evaluation, "
                f"whichever rank or loader worker read it): as many as {got['slots'] / want.samples:.4g} evaluations "
                f"of {want.samples}; the workload makes {want.count} evaluations of {want.samples} ({need_slots} samples)")
    return None


CHECK = Check("workload_intact", Spec, judge,
              property="the job does the brief's work: every sample, the effective batch per optimizer step, all the steps and evaluations")
