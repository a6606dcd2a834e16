"""workload_intact: the run did the work the manifest says, with the kit's files as shipped.

Everything here comes from the harness's records: steps from the optimizer hook, samples from the
datasets' ledger, the parameter count from the saved final parameters, the world size from the
launcher. A submission cannot pass by printing, by shrinking the run, or by writing records itself.
"""

from __future__ import annotations

from typing import Any, Literal

from grader.checks.base import Check, CheckResult, CheckSpec, Context, need, trained_to_the_end


class Spec(CheckSpec):
    name: Literal["workload_intact"]


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
        bad = {r: s for r, s in steps.items() if s != wl.steps}
        if bad:
            r, s = next(iter(bad.items()))
            problems.append(f"rank {r} made {s} optimizer steps; the workload is {wl.steps}")
        total = sum(samples.values())
        if total != wl.steps * wl.global_batch:
            per_step = total / max(sum(steps.values()) / max(len(steps), 1), 1)
            problems.append(f"the ranks consumed {total} samples in all, {per_step:g} per step; the workload is "
                            f"{wl.steps} steps of a global batch of {wl.global_batch} "
                            f"({wl.steps * wl.global_batch} samples)")
        if distinct != wl.dataset_size:
            problems.append(f"{distinct} distinct samples of {wl.dataset!r} were consumed; the dataset has "
                            f"{wl.dataset_size}")
        for ds, want in wl.evaluations.items():
            problem = _evaluations(ev, ds, want, evidence)
            if problem:
                problems.append(problem)
        bad_p = {r: p for r, p in params.items() if p != wl.params and r not in killed}
        if bad_p:
            r, p = next(iter(bad_p.items()))
            problems.append(f"rank {r} trained {p} parameters; the model has {wl.params}")
    if problems:
        return CheckResult(name, False, "; ".join(problems), evidence)
    if not finished:
        return CheckResult(name, False, f"{ev.describe()} did not complete, so the work done cannot be "
                           "checked", evidence)
    after = "" if ev.status == "ok" else f" (the job then ended with status {ev.status})"
    return CheckResult(name, True, f"{w} ranks × {wl.steps} steps, {wl.steps * wl.global_batch} samples "
                       f"covering all {wl.dataset_size}, {wl.params} parameters, files as shipped{after}", evidence)


def _evaluations(ev, ds: str, want, evidence: dict[str, Any]) -> str | None:
    """The evaluations on dataset ``ds``: what all ranks read together at each step, one
    evaluation per step with reads (whichever ranks did them)."""
    per_step: dict[tuple[int, int], set[int]] = {}
    for r in ev.ranks:
        for rec in ev.ledgers.get(r, []):
            if rec.get("ds") == ds:
                per_step.setdefault((int(rec.get("a", 0)), int(rec.get("s", 0))), set()).add(int(rec["i"]))
    sizes = [len(v) for _, v in sorted(per_step.items())]
    evidence.setdefault("evaluations", {})[ds] = {"count": len(sizes), "distinct_per_evaluation": sorted(set(sizes))}
    if len(sizes) != want.count:
        return f"{len(sizes)} evaluations on {ds!r} were made; the workload makes {want.count}"
    short = [n for n in sizes if n != want.samples]
    if short:
        return (f"an evaluation on {ds!r} read {short[0]} distinct samples over all ranks; each evaluation of the "
                f"workload reads {want.samples}")
    return None


CHECK = Check("workload_intact", Spec, judge)
