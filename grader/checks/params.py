"""Checks over final parameters, saved by the rank bootstrap at exit (never by the script)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grader.checks.base import CheckResult, Context, need, need_trained
from grader.evidence import RunEvidence, harness_failed

WRAPPER_PREFIXES = ("module.", "_orig_mod.")


def compare(a: dict[str, Any], b: dict[str, Any], rtol: float, atol: float) -> dict[str, Any]:
    """How far two name->tensor dicts are apart, and whether they agree within tolerance."""
    import torch

    if set(a) != set(b):
        return {"same_names": False, "only_first": sorted(set(a) - set(b))[:5],
                "only_second": sorted(set(b) - set(a))[:5], "close": False}
    worst_name, worst_abs, worst_rel, close = None, 0.0, 0.0, True
    for name in sorted(a):
        x, y = a[name].double(), b[name].double()
        if x.shape != y.shape:
            return {"same_names": True, "close": False, "shape_mismatch": name,
                    "shapes": [list(x.shape), list(y.shape)]}
        diff = (x - y).abs()
        abs_max = float(diff.max()) if diff.numel() else 0.0
        # relative to the tensor's size, not element-wise: near-zero elements make those meaningless
        rel = float((x - y).norm() / y.norm().clamp_min(1e-12)) if diff.numel() else 0.0
        if not torch.allclose(x, y, rtol=rtol, atol=atol):
            close = False
        if abs_max > worst_abs:
            worst_name, worst_abs, worst_rel = name, abs_max, rel
    return {"same_names": True, "close": close, "max_abs_diff": worst_abs,
            "max_rel_diff": worst_rel, "worst_param": worst_name}


def _ranks_agree(ev: RunEvidence, name: str) -> CheckResult | dict[str, Any]:
    """Rank 0's parameters, after checking every rank holds the same ones."""
    missing = [r for r in ev.ranks if ev.params(r) is None]
    if missing:
        return CheckResult(name, False, f"{ev.describe()}: rank {missing[0]} left no final parameters "
                           "(it stepped no optimizer, or its record was altered)", {"missing_ranks": missing})
    base = ev.params(0)
    for r in sorted(ev.ranks):
        if r == 0:
            continue
        cmp = compare(ev.params(r), base, rtol=0.0, atol=1e-6)
        if not cmp["close"]:
            return CheckResult(name, False, f"{ev.describe()}: rank {r}'s final parameters differ from "
                               f"rank 0's (max difference {cmp.get('max_abs_diff', float('nan')):.3g} in "
                               f"{cmp.get('worst_param')}): the replicas diverged", {"rank": r, **cmp})
    return base


def matches_reference(spec, ctx: Context) -> CheckResult:
    name = "matches_reference"
    ev, ref = need_trained(ctx, name), need(ctx, name, "reference")
    for x in (ev, ref):
        if isinstance(x, CheckResult):
            return x
    mine, theirs = _ranks_agree(ev, name), _ranks_agree(ref, name)
    if isinstance(mine, CheckResult):
        return mine
    if isinstance(theirs, CheckResult):
        theirs.environment = True
        return theirs
    # A run that was killed and resumed (between checkpoints: "resume"; during a checkpoint write:
    # "resume_save") must end where an uninterrupted one does.
    resumes: dict[str, Any] = {}
    for role in sorted(r for r in ctx.runs if r.startswith("resume")):
        resumed = ctx.runs[role]
        if resumed.status != "ok" or harness_failed(resumed):
            continue
        after = _ranks_agree(resumed, name)
        if isinstance(after, CheckResult):
            return after
        rc = resumes[role] = compare(after, theirs, spec.rtol, spec.atol)
        if not rc["close"]:
            detail = (f"largest difference {rc['max_abs_diff']:.3g} in {rc['worst_param']}"
                      if rc.get("same_names") else "the parameter sets differ")
            how = "during a checkpoint write" if role == "resume_save" else "mid-run"
            return CheckResult(name, False, f"the run that was killed {how} and restarted ends at different "
                               f"parameters from the reference's uninterrupted run: {detail}", {role: rc})
    cmp = compare(mine, theirs, spec.rtol, spec.atol)
    cmp.update(rtol=spec.rtol, atol=spec.atol, **({"resumed_runs": resumes} if resumes else {}))
    if not cmp["same_names"] or "shape_mismatch" in cmp:
        return CheckResult(name, False, "the model's parameters are not the reference model's "
                           f"(names or shapes differ: {cmp})", cmp)
    if cmp["max_abs_diff"] == 0:
        return CheckResult(name, True, "final parameters are identical to the reference run's", cmp)
    msg = (f"final parameters {'match' if cmp['close'] else 'differ from'} the reference run's: largest "
           f"difference {cmp['max_abs_diff']:.3g} ({cmp['max_rel_diff']:.2%} of its norm) in "
           f"{cmp['worst_param']}; tolerance rtol={spec.rtol:g}, atol={spec.atol:g}")
    return CheckResult(name, cmp["close"], msg, cmp)


def world_size_equivalence(spec, ctx: Context) -> CheckResult:
    name = "world_size_equivalence"
    runs = {}
    for n in spec.world_sizes:
        role = "main" if n == ctx.manifest.world_size else f"ws{n}"
        ev = need(ctx, name, role)
        if isinstance(ev, CheckResult):
            return ev
        params = _ranks_agree(ev, name)
        if isinstance(params, CheckResult):
            return params
        runs[n] = params
    first, *rest = spec.world_sizes
    evidence: dict[str, Any] = {"world_sizes": spec.world_sizes, "rtol": spec.rtol, "atol": spec.atol}
    for n in rest:
        cmp = compare(runs[n], runs[first], spec.rtol, spec.atol)
        evidence[f"{first}_vs_{n}"] = cmp
        if not cmp["close"]:
            detail = (f"largest difference {cmp['max_abs_diff']:.3g} ({cmp['max_rel_diff']:.2%} of its norm) in "
                      f"{cmp['worst_param']}" if cmp.get("same_names") else "the parameter sets differ")
            steps = {k: max((o.steps for o in ctx.runs["main" if k == ctx.manifest.world_size else f"ws{k}"]
                             .ranks.values()), default=0) for k in (first, n)}
            evidence["steps"] = steps
            return CheckResult(name, False, f"run at world size {n}, the script ends at different parameters "
                               f"from world size {first}: {detail} (steps per rank: "
                               f"{steps[first]} at world size {first}, {steps[n]} at {n})", evidence)
    return CheckResult(name, True, f"world sizes {', '.join(map(str, spec.world_sizes))} end at the same "
                       f"parameters within rtol={spec.rtol:g}, atol={spec.atol:g}", evidence)


def strip_wrappers(name: str) -> str:
    for prefix in WRAPPER_PREFIXES:
        while name.startswith(prefix):
            name = name[len(prefix):]
    return name


def checkpoint_valid(spec, ctx: Context) -> CheckResult:
    import torch

    name = "checkpoint_valid"
    ev = need(ctx, name, "main", ok_only=False)
    if isinstance(ev, CheckResult):
        return ev
    path = Path(ev.run_dir) / "work" / spec.path
    evidence: dict[str, Any] = {"path": spec.path}
    if not path.exists():
        return CheckResult(name, False, f"no checkpoint at {spec.path} after the run", evidence)
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        return CheckResult(name, False, f"the checkpoint at {spec.path} does not load: "
                           f"{type(e).__name__}: {str(e).splitlines()[0][:200]}", evidence)
    if not isinstance(ckpt, dict):
        return CheckResult(name, False, f"the checkpoint at {spec.path} holds a {type(ckpt).__name__}, "
                           "not a dict of state", evidence)
    missing = [k for k in spec.require_keys if k not in ckpt]
    evidence["keys"] = sorted(map(str, ckpt))[:20]
    if missing:
        return CheckResult(name, False, f"the checkpoint at {spec.path} has no {', '.join(missing)} "
                           f"(it holds: {', '.join(evidence['keys'])})", evidence)
    state = ckpt.get(spec.key) if spec.key else ckpt
    if not isinstance(state, dict):
        return CheckResult(name, False, f"the checkpoint at {spec.path} has no model state under "
                           f"{spec.key!r}", evidence)
    writers = _writers(ev, path)
    evidence["writers"] = writers
    if spec.single_writer and len(writers) > 1:
        return CheckResult(name, False, f"ranks {' and '.join(map(str, writers))} all wrote {spec.path} "
                           "(from the save trace): which one's bytes it holds depends on who finished last",
                           evidence)
    if ev.status != "ok":
        return CheckResult(name, False, f"the checkpoint loads, but {ev.describe()} did not complete, so it "
                           "cannot hold the final parameters", evidence)
    final = ev.params(0)
    if final is None:
        return CheckResult(name, False, "rank 0 left no final parameters to compare the checkpoint with", evidence)
    saved = {strip_wrappers(k): v for k, v in state.items() if hasattr(v, "shape")}
    saved = {k: v for k, v in saved.items() if k in final}
    cmp = compare(saved, final, spec.rtol, spec.atol)
    evidence.update(cmp)
    if not cmp["same_names"]:
        return CheckResult(name, False, f"the checkpoint at {spec.path} lacks parameters the model trained "
                           f"(e.g. {', '.join(cmp['only_second'])})", evidence)
    if not cmp["close"]:
        return CheckResult(name, False, f"the checkpoint at {spec.path} is not the final model: largest "
                           f"difference {cmp.get('max_abs_diff', float('nan')):.3g} in {cmp.get('worst_param')}", evidence)
    if spec.reference_keys:
        ref = need(ctx, name, "reference")
        if isinstance(ref, CheckResult):
            return ref
        theirs = torch.load(Path(ref.run_dir) / "work" / spec.path, map_location="cpu", weights_only=True)
        for k in spec.reference_keys:
            mine_v, ref_v = ckpt.get(k), theirs.get(k)
            evidence.setdefault("reference_values", {})[k] = {"submission": _scalar(mine_v), "reference": _scalar(ref_v)}
            if mine_v is None or not torch.allclose(torch.as_tensor(mine_v, dtype=torch.float64),
                                                    torch.as_tensor(ref_v, dtype=torch.float64),
                                                    rtol=1e-4, atol=1e-6):
                return CheckResult(name, False, f"the checkpoint's {k!r} is {_scalar(mine_v)}; the reference run's "
                                   f"checkpoint records {_scalar(ref_v)}", evidence)
    what = " and " + ", ".join(spec.reference_keys) + " as in the reference run" if spec.reference_keys else ""
    return CheckResult(name, True, f"the checkpoint at {spec.path} loads and holds the final parameters{what}",
                       evidence)


def _writers(ev: RunEvidence, path: Path) -> list[int]:
    """Ranks that wrote ``path`` (directly, or by renaming or copying a file into it)."""
    state = ev.file_history.get(str(path.resolve()))
    return sorted(state.writers) if state else []


def _scalar(v: Any) -> Any:
    if hasattr(v, "tolist"):
        v = v.tolist()
    return round(v, 6) if isinstance(v, float) else v
