"""Grading, phase by phase: assemble the submission, run what the manifest asks (each run a run
dir), judge the run dirs with the checks, score, and write result.json. Re-grading reads the run
dirs named in a result.json and never launches anything."""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import platform
import shutil
import socket
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from grader import result as results
from grader.checks import CheckResult, Context, run_check
from grader.evidence import EnvironmentFailure, RunEvidence, harness_failed, load_run
from grader.exercises import Exercise, kit_root
from grader.manifest import Manifest
from grader.scoring import score
from grader.submission import Submission, assemble, files_digest
from grader.throughput import ThroughputResult, job_rate, measure
from harness.launch import Fault, LaunchConfig, launch

Progress = Callable[[str], None]


@dataclass
class GradeOptions:
    kind: str = "workspace"  # workspace | solution | broken
    workspace: Path | None = None
    out_dir: Path | None = None
    repeats: int | None = None  # throughput rounds; the manifest's when None
    # one measured round, no warm-up, no compute bound: enough to show a script is no faster than
    # the broken baseline (verify's broken grading), not to score a fix
    quick_throughput: bool = False
    device: str = "auto"
    throughput: bool = True


def plan_roles(m: Manifest) -> dict[str, dict[str, Any]]:
    """The runs a grading needs, by role, with their launch settings."""
    roles: dict[str, dict[str, Any]] = {"main": {"nproc": m.world_size}}
    if m.check("checkpoint_fresh"):  # which step a checkpoint holds is told by parameter fingerprints
        roles["main"]["env"] = {"TRAINWRECK_FINGERPRINT": "1"}
    wse = m.check("world_size_equivalence")
    if wse:
        for n in wse.world_sizes:
            if n != m.world_size:
                roles[f"ws{n}"] = {"nproc": n}
    sp = m.check("sample_partition")
    if sp and sp.resume:
        roles["resume"] = {"nproc": m.world_size, "max_restarts": 1,
                           "faults": [Fault(rank=sp.kill_rank, step=sp.kill_step)],
                           "env": {"TRAINWRECK_FINGERPRINT": "1"}}
    cs = m.check("checkpoints_sound")
    if cs:
        # A kill between checkpoints (shared with sample_partition's when both ask for one), and a
        # kill half-way through a checkpoint write, on whichever ranks write checkpoints.
        roles.setdefault("resume", {"nproc": m.world_size, "max_restarts": 1,
                                    "faults": [Fault(rank=cs.kill_rank, step=cs.kill_step)],
                                    "env": {"TRAINWRECK_FINGERPRINT": "1"}})
        if cs.save_kill_step:
            roles["resume_save"] = {"nproc": m.world_size, "max_restarts": 1,
                                    "faults": [Fault(rank=r, step=cs.save_kill_step, when="save")
                                               for r in range(m.world_size)],
                                    "env": {"TRAINWRECK_FINGERPRINT": "1"}}
    return roles


def run_role(ex: Exercise, script_dir: Path, run_dir: Path, role: str, device: str, nproc: int,
             max_restarts: int = 0, faults: list[Fault] | None = None,
             env: dict[str, str] | None = None, script: str | None = None) -> RunEvidence:
    """``script`` runs another file of the assembled folder than the entry (the compute bound),
    without the entry's arguments."""
    m = ex.manifest
    (run_dir / "work").mkdir(parents=True, exist_ok=True)
    cfg = LaunchConfig(script=script_dir / (script or m.entry), script_args=[] if script else list(m.run.args),
                       nproc=nproc,
                       max_restarts=max_restarts, device=device, hang_timeout=m.run.hang_timeout,
                       startup_timeout=m.run.startup_timeout, timeout=m.run.timeout,
                       pg_timeout=m.run.pg_timeout, run_dir=run_dir, cwd=run_dir / "work",
                       faults=list(faults or []), env=dict(env or {}))
    launch(cfg)
    return load_run(role, run_dir)


def _harness_digest() -> str:
    h = hashlib.sha256()
    for p in sorted((kit_root() / "harness").glob("*.py")):
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def reference_run(ex: Exercise, device: str, nproc: int, progress: Progress) -> RunEvidence:
    """The reference solution's run, cached on disk: the same solution files, harness, torch, world
    size and device give the same parameters, so it runs once per machine, not once per grading."""
    m = ex.manifest
    try:
        torch_v = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_v = "none"
    key = hashlib.sha256("|".join([
        files_digest(ex.solution_dir, m.editable), _harness_digest(), torch_v, str(nproc), device,
        " ".join(m.run.args), m.entry]).encode()).hexdigest()[:20]
    cache = kit_root() / ".trainwreck" / "cache" / m.slug / f"reference-ws{nproc}-{key}"
    if (cache / "run.json").exists():
        ev = load_run("reference", cache)
        if ev.status == "ok":
            return ev
    progress(f"running the reference solution (world size {nproc}; cached afterwards)")
    tmp = cache.with_name(cache.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    src = tmp.parent / (tmp.name + "-src")
    sub = assemble(ex, "solution", None, src)
    ev = run_role(ex, sub.dir, tmp, "reference", device, nproc)
    if ev.status != "ok" or harness_failed(ev):
        raise EnvironmentFailure(f"the reference solution of {m.slug} did not complete "
                                 f"(status {ev.status}, run dir {tmp}); the kit or the machine is broken")
    shutil.rmtree(cache, ignore_errors=True)
    os.replace(tmp, cache)
    shutil.rmtree(src, ignore_errors=True)
    return load_run("reference", cache)


def grade(ex: Exercise, opts: GradeOptions, progress: Progress = lambda s: None) -> dict[str, Any]:
    m = ex.manifest
    t0 = time.time()
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    out = (opts.out_dir or Path(".trainwreck") / "grades" / m.slug / f"{stamp}-{opts.kind}").resolve()
    out.mkdir(parents=True, exist_ok=True)
    sub = assemble(ex, opts.kind, opts.workspace, out / "submission")
    runs: dict[str, RunEvidence] = {}
    timings: dict[str, float] = {}
    env_failure: str | None = None
    try:
        for role, settings in plan_roles(m).items():
            progress(f"running {role} (world size {settings['nproc']}"
                     f"{', killed and restarted' if settings.get('faults') else ''})")
            t = time.time()
            runs[role] = run_role(ex, sub.dir, out / "runs" / role, role, opts.device, **settings)
            timings[role] = round(time.time() - t, 2)
        ckpt = m.check("checkpoint_valid")
        tail = m.check("step_time_tail")
        if (m.check("matches_reference") or (ckpt and ckpt.reference_keys) or m.check("checkpoint_fresh")
                or (tail and tail.max_median_over_reference) or (m.throughput and opts.throughput)):
            t = time.time()
            runs["reference"] = reference_run(ex, opts.device, m.world_size, progress)
            timings["reference"] = round(time.time() - t, 2)
    except EnvironmentFailure as e:
        env_failure = str(e)
    checks = [run_check(spec, Context(m, runs, sub.protected_changed)) for spec in m.checks]
    tp = None
    if m.throughput and opts.throughput and env_failure is None:
        t = time.time()
        tp = _throughput(ex, sub, out, opts, checks, progress)
        timings["throughput"] = round(time.time() - t, 2)
        checks.append(_throughput_check(tp, m))
    if env_failure:
        checks.append(CheckResult("environment", False, env_failure, environment=True))
    s = score(checks, tp, m.throughput.weight if m.throughput else 0.0, issues=m.issues)
    timings["total"] = round(time.time() - t0, 2)
    res = results.build(
        exercise=m.slug, submission=sub, checks=checks, throughput=tp, score=s,
        environment=environment(runs.get("main"), opts.device), timings=timings,
        run_dirs={role: str(ev.run_dir) for role, ev in runs.items()}, out_dir=out,
    )
    results.write(out / "result.json", res)
    return res


def _throughput(ex, sub: Submission, out: Path, opts: GradeOptions, checks, progress) -> ThroughputResult:
    m = ex.manifest
    tcfg = m.throughput
    correct = all(c.passed for c in checks if c.required)
    broken = assemble(ex, "broken", None, out / "throughput-broken")
    reference = assemble(ex, "solution", None, out / "throughput-reference")
    # The bound runs from the kit's own copy of the exercise (the broken assembly): its model and
    # batches are the kit's, whatever the submission's files say.
    dirs = {"broken": broken.dir, "candidate": sub.dir, "reference": reference.dir, "bound": broken.dir}

    def run(role: str, tag: str) -> RunEvidence:
        progress(f"throughput {tag}: {role}")
        return run_role(ex, dirs[role], out / "runs" / f"tp-{tag}-{role}", role, opts.device, m.world_size,
                        script=tcfg.bound if role == "bound" else None)

    pass_speedup = 1 + 0.5 * (tcfg.target_speedup - 1)
    if opts.quick_throughput:
        tp = measure(run, 1, 0, tcfg.suspicious_factor, pass_speedup, bound=False)
        tp.note = (tp.note + "; " if tp.note else "") + "one round, no warm-up, no compute bound (quick)"
    else:
        tp = measure(run, opts.repeats or tcfg.rounds, tcfg.warmup_rounds, tcfg.suspicious_factor,
                     pass_speedup, bound=tcfg.bound is not None)
    tp.counted = correct
    if not correct:
        tp.note = (tp.note + "; " if tp.note else "") + "not counted: a required correctness check failed"
    return tp


def _throughput_check(tp: ThroughputResult, m: Manifest) -> CheckResult:
    msg = (f"{tp.speedup:.2f}x the broken baseline's steps/s (median of {len(tp.rounds)} rounds, spread "
           f"{tp.spread:.0%}); the reference reaches {tp.reference_speedup:.2f}x; pass at "
           f"{tp.pass_speedup:.2f}x")
    if tp.fraction_of_bound is not None:
        msg += (f"; {tp.fraction_of_bound:.0%} of the compute bound's steps/s (reference "
                f"{tp.reference_fraction_of_bound:.0%}; reported, not graded)")
    if tp.note:
        msg += f" ({tp.note})"
    return CheckResult("throughput", tp.passed and tp.counted, msg, tp.to_json(), required=m.throughput.required,
                       weight=m.throughput.weight)


def environment(main: RunEvidence | None, device: str) -> dict[str, Any]:
    try:
        torch_v = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_v = None
    return {
        "torch": torch_v, "python": platform.python_version(), "platform": platform.platform(),
        "host": socket.gethostname(), "cpu_count": os.cpu_count(), "device_requested": device,
        "device": main.run.get("device") if main else None,
        "backend": main.backend if main else None,
        "world_size": main.world_size if main else None,
    }


def regrade(result_path: Path, ex: Exercise) -> dict[str, Any]:
    """Judge the stored run dirs of an earlier grading again, with the current checks."""
    old = results.read(result_path)
    runs = {role: load_run(role, Path(d)) for role, d in old["run_dirs"].items()}
    protected = old["submission"].get("protected_changed", [])
    checks = [run_check(spec, Context(ex.manifest, runs, protected)) for spec in ex.manifest.checks]
    tp = None
    if old.get("throughput"):
        tp = ThroughputResult(**{k: v for k, v in old["throughput"].items()})
        checks.append(_throughput_check(tp, ex.manifest))
    s = score(checks, tp, ex.manifest.throughput.weight if ex.manifest.throughput else 0.0,
              issues=ex.manifest.issues)
    res = dict(old)
    res.update(results.verdict(checks, tp, s))
    res["regraded_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return res


__all__ = ["GradeOptions", "grade", "regrade", "plan_roles", "job_rate"]
