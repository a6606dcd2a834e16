"""Grading is run, then judge: assemble the submission, launch the runs the checks declare (each
run a run dir), let checks with runs of their own measure (throughput), then judge the run dirs
(``grader.judge``) and write result.json once. Re-grading reads the run dirs named in a
result.json and judges them again; it never launches anything."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import os
import platform
import secrets
import shutil
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from grader import flags as flags_mod
from grader import sealing
from grader.checks import REGISTRY
from grader.errors import UserError
from grader.evidence import EnvironmentFailure, RunEvidence, TamperedRun, harness_failed, load_run
from grader.exercises import Exercise, kit_root
from grader.judge import judge
from grader.manifest import Manifest
from grader.result import Flag, GradeResult, Isolation, SubmissionInfo
from grader.roles import FINGERPRINTS, Plan, Role, RunRequest, grading_env
from grader.submission import Submission, assemble, check_source, files_digest
from grader.throughput import Measuring, job_rate
from harness.errors import LaunchError
from harness.executor import Executor, Plain, Sandboxed
from harness.faults import OVERFLOW_ENV
from harness.launch import KIT_ROOT, Fault, LaunchConfig, launch

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
    # no throughput rounds at all (the throughput check is then not judged): for gradings whose
    # verdict correctness decides, as a cheat in the variant corpus
    skip_measurements: bool = False
    device: str = "auto"
    # how every run of the candidate's code runs (harness.executor), chosen once where the grading
    # starts: in a bubblewrap sandbox; Plain only on request (--no-sandbox, ``executor_for``): the
    # grade is then unisolated, and result.json and every report say so
    executor: Executor = field(default_factory=Sandboxed)


def plan(m: Manifest) -> Plan:
    """The runs a grading needs: the submission as the manifest runs it, then what each check
    declares, and the reference run when a check compares against it."""
    p = Plan()
    p.add(RunRequest(Role.MAIN, m.world_size))
    for spec in m.checks:
        check = REGISTRY[spec.name]
        for req in check.runs(spec, m):
            p.add(req)
        p.reference = p.reference or check.needs_reference(spec)
    return p


def run_role(ex: Exercise, script_dir: Path, run_dir: Path, role: str, device: str, nproc: int,
             max_restarts: int = 0, faults: list[Fault] | None = None,
             env: dict[str, str] | None = None, script: str | None = None,
             overflow: bool = True, executor: Executor = Plain(), watch: list[str] | None = None,
             opaque: bool = True) -> RunEvidence:
    """``script`` runs another file of the assembled folder than the entry (the compute bound),
    without the entry's arguments. ``overflow``: inject the manifest's ``[run] overflow_at_step``
    (every grading run does; recording the broken script's logs does not: the overflow is a test a
    fix must pass, not the symptom the candidate is shown). ``executor``: how the run's processes
    run; sandboxed, the assembled folder is read-only and a fresh work dir the one folder they may
    write. ``watch``: files (work-dir relative) the parent watches from outside while it runs.
    ``opaque``: the run goes in a folder named by a random token beside ``run_dir``, which becomes a
    link to it (``opaque_run_dir``); the evidence holds the real path. The run dir is sealed once
    the run has ended (``grader.sealing``)."""
    m = ex.manifest
    if opaque:
        run_dir = opaque_run_dir(run_dir)
    (run_dir / "work").mkdir(parents=True, exist_ok=True)
    env = grading_env(env)
    if overflow and m.run.overflow_at_step is not None:  # every role meets the same fault, the reference too
        env[OVERFLOW_ENV] = str(m.run.overflow_at_step)
    cfg = LaunchConfig(script=script_dir / (script or m.entry), script_args=[] if script else list(m.run.args),
                       nproc=nproc,
                       max_restarts=max_restarts, device=device, hang_timeout=m.run.hang_timeout,
                       startup_timeout=m.run.startup_timeout, timeout=m.run.timeout,
                       pg_timeout=m.run.pg_timeout, run_dir=run_dir, cwd=run_dir / "work",
                       faults=list(faults or []), env=env,
                       store=m.run.store.launch_config(keep_copies=True) if m.run.store else None,
                       executor=executor, limits=m.limits.to_limits(), watch=list(watch or []))
    if launch(cfg).status == "interrupted":
        # Ctrl-C or SIGTERM ended this run (the harness ended its ranks and recorded it): the
        # grading stops here instead of going on to the next run
        raise KeyboardInterrupt
    sealing.seal(run_dir)
    return load_run(role, run_dir)


def opaque_run_dir(link: Path) -> Path:
    """Make a run's folder at ``<parent>/<random token>`` and the link ``<parent>/<name>`` to it
    (relative), for people and the docs; return the real folder. The script's working directory
    (``<token>/work``, bound at its real path in the sandbox, so ``os.getcwd()`` and
    ``/proc/self/mountinfo`` show it) then says nothing of its role: not ``tp-round0-candidate``
    (timed), not ``resume`` (to be killed). A ``<name>`` already there (an earlier run's folder or
    link) is refused, as ``launch`` refuses a run dir that holds a run; an empty folder is taken
    over."""
    link = Path(link)
    link.parent.mkdir(parents=True, exist_ok=True)
    parent = link.parent.resolve()
    named = parent / link.name
    if named.is_dir() and not named.is_symlink() and not any(named.iterdir()):
        named.rmdir()  # made but never used (as before, when the run went in it): the name is free
    if os.path.lexists(named):
        raise LaunchError(f"{named} already exists (an earlier run?); give a new or empty folder")
    while True:
        token = secrets.token_hex(8)
        real = parent / token
        try:
            real.mkdir()
            break
        except FileExistsError:
            continue
    try:
        os.symlink(token, named, target_is_directory=True)
    except FileExistsError:
        real.rmdir()
        raise LaunchError(f"{named} already exists (an earlier run?); give a new or empty folder") from None
    return real


def isolation(executor: Executor) -> Isolation:
    """How this grading will run the candidate's code, as result.json records it: refused (one line
    naming the fix) when the sandbox cannot run here and ``--no-sandbox`` was not given."""
    if (why := executor.refusal()) is not None:
        raise UserError(why)
    return Isolation(**asdict(executor.describe()))


def _check_out(out: Path) -> None:
    """A sandboxed run may write only its work dir, which must not lie inside the kit (outside its
    ``.trainwreck/`` folder, where gradings go by default)."""
    if out == KIT_ROOT or KIT_ROOT in out.parents and (KIT_ROOT / ".trainwreck") not in out.parents:
        raise UserError(f"--out {out} is inside the kit, where a sandboxed run may not write; give a folder "
                        f"outside it, or under {KIT_ROOT / '.trainwreck'}")


def _harness_digest() -> str:
    h = hashlib.sha256()
    for p in sorted((kit_root() / "harness").glob("*.py")):
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


REFERENCE_ATTEMPTS = 2


def _kept_failed(run_dir: Path) -> Path:
    """Move a failed reference run aside (beside the cache, never in it) for whoever debugs it."""
    kept = run_dir.with_name(run_dir.name + f"-failed{int(time.time())}")
    shutil.rmtree(kept, ignore_errors=True)
    os.replace(run_dir, kept)
    return kept


def reference_run(ex: Exercise, device: str, nproc: int, progress: Progress, executor: Executor = Plain(),
                  notes: list[str] | None = None) -> RunEvidence:
    """The reference solution's run, cached on disk: the same solution files, harness, torch, world
    size, device and isolation (``executor``) give the same parameters and measures, so it runs
    once per machine, not once per grading. It is always recorded with parameter fingerprints: its
    path is what ``trajectory`` compares. The cache lives in the kit's ``.trainwreck/``, which no sandbox shows;
    each entry is sealed, and one that changed since is reported in ``notes`` and run again."""
    m = ex.manifest
    try:
        torch_v = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_v = "none"
    key = hashlib.sha256("|".join([
        files_digest(ex.solution_dir, m.editable), _harness_digest(), torch_v, str(nproc), device,
        " ".join(m.run.args), m.entry, "fingerprints", f"overflow={m.run.overflow_at_step}",
        "sandbox" if executor.sandboxed else "unisolated", m.limits.model_dump_json()]).encode()).hexdigest()[:20]
    cache = kit_root() / ".trainwreck" / "cache" / m.slug / f"reference-ws{nproc}-{key}"
    if (cache / "run.json").exists():
        try:
            ev = load_run("reference", cache, sealed=True)
            if ev.status == "ok":
                return ev
        except TamperedRun as e:
            note = f"the cached reference run of {m.slug} changed after it was sealed; it was run again ({e})"
            progress(note)
            if notes is not None:
                notes.append(note)
        except (EnvironmentFailure, OSError):
            pass  # unreadable, or moved aside by another grading meanwhile: made again below
    progress(f"running the reference solution (world size {nproc}; cached afterwards)")
    tmp = cache.with_name(cache.name + f".tmp{os.getpid()}")
    src = tmp.parent / (tmp.name + "-src")
    sub = None
    for attempt in range(REFERENCE_ATTEMPTS):
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            sub = sub or assemble(ex, "solution", None, src)
            ev = run_role(ex, sub.dir, tmp, "reference", device, nproc, env=dict(FINGERPRINTS), executor=executor,
                          opaque=False)  # the kit's own solution, moved into the cache by name
        except BaseException:  # interrupted: no half-made run left in the cache
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.rmtree(src, ignore_errors=True)
            raise
        if ev.status == "ok" and not harness_failed(ev):
            break
        if attempt + 1 < REFERENCE_ATTEMPTS:
            # The reference is trusted code: a failed run is the machine's or torch's (a rare gloo
            # teardown deadlock after destroy_process_group, seen once in ~50 reference runs), and
            # the candidate's verdict must not hang on it. Said, never silent.
            note = (f"the reference run of {m.slug} ended {ev.status}; it was run once more "
                    f"(the failed run: {_kept_failed(tmp)})")
            progress(note)
            if notes is not None:
                notes.append(note)
    else:
        raise EnvironmentFailure(f"the reference solution of {m.slug} did not complete "
                                 f"(status {ev.status}, run dir {tmp}); the kit or the machine is broken")
    shutil.rmtree(src, ignore_errors=True)
    return _settle(tmp, cache)


def _settle(run_dir: Path, cache: Path) -> RunEvidence:
    """Move a finished reference run into the cache, and return the cached run. Gradings run side by
    side (two interviews, pytest-xdist): where another grading put the same reference there
    meanwhile, that one stays and this run is dropped; a stale entry is moved aside in one step
    before it is removed, so no reader finds it half gone."""
    if cache.exists():
        with contextlib.suppress(EnvironmentFailure, OSError):
            theirs = load_run("reference", cache, sealed=True)
            if theirs.status == "ok":
                shutil.rmtree(run_dir, ignore_errors=True)
                return theirs
        stale = cache.with_name(cache.name + f".stale{os.getpid()}")
        with contextlib.suppress(OSError):
            os.replace(cache, stale)
        shutil.rmtree(stale, ignore_errors=True)
    try:
        os.replace(run_dir, cache)
    except OSError:
        shutil.rmtree(run_dir, ignore_errors=True)
    return load_run("reference", cache)


def grade(ex: Exercise, opts: GradeOptions, progress: Progress = lambda s: None) -> GradeResult:
    """Assemble the submission, run the plan, measure, judge, write result.json."""
    m = ex.manifest
    t0 = time.time()
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    out = (opts.out_dir or Path(".trainwreck") / "grades" / m.slug / f"{stamp}-{opts.kind}").resolve()
    check_source(ex, opts.kind, opts.workspace)  # a rejected workspace leaves no folder behind
    iso = isolation(opts.executor)  # refused before anything is made when the sandbox cannot run here
    if iso.sandboxed:
        _check_out(out)
    else:
        progress(f"warning: {iso.line()}")
    _make_out(out)
    sub = assemble(ex, opts.kind, opts.workspace, out / "submission")
    runs: dict[str, RunEvidence] = {}
    timings: dict[str, float] = {}
    env_failure: str | None = None
    notes: list[str] = []
    todo = plan(m)
    try:
        for name, req in todo.runs.items():
            progress(f"running {name} (world size {req.nproc}{', killed and restarted' if req.faults else ''})")
            t = time.time()
            runs[name] = run_role(ex, sub.dir, out / "runs" / name, name, opts.device, **req.launch_settings(),
                                  executor=opts.executor)
            timings[name] = round(time.time() - t, 2)
        if todo.reference:
            t = time.time()
            runs[Role.REFERENCE] = reference_run(ex, opts.device, m.world_size, progress,
                                                 executor=opts.executor, notes=notes)
            timings[Role.REFERENCE] = round(time.time() - t, 2)
    except EnvironmentFailure as e:
        env_failure = str(e)
    measurements: dict[str, Any] = {}
    if env_failure is None and not opts.skip_measurements:
        for spec in m.checks:
            check = REGISTRY[spec.name]
            if check.measure is not None:
                t = time.time()
                measurements[spec.name] = check.measure(spec, _measuring(ex, sub, out, opts, progress))
                timings[spec.name] = round(time.time() - t, 2)
    verdict = judge(m, runs, sub.protected_changed, measurements, env_failure, isolation=iso)
    run_dirs = {name: str(ev.run_dir) for name, ev in runs.items()}
    found = flags_mod.gather(sub.dir, list(m.editable), flags_mod.candidate_run_dirs(run_dirs, out), notes)
    timings["total"] = round(time.time() - t0, 2)
    res = GradeResult(
        exercise=m.slug, graded_at=datetime.now(UTC).isoformat(timespec="seconds"),
        submission=SubmissionInfo(kind=sub.kind, source=str(sub.source), sha256=sub.sha256,
                                  protected_changed=sub.protected_changed),
        passed=False, score=0.0, measurements=measurements,
        environment=environment(runs.get(Role.MAIN), opts.device), timings=timings,
        run_dirs=run_dirs, out_dir=str(out), isolation=iso, flags=found, sealed=True,
    ).with_verdict(verdict.checks, verdict.score)
    res.write()
    return res


def _make_out(out: Path) -> None:
    """A fresh folder for this grading: a used one would mix another grading's records with this
    one's (a grader killed mid-run leaves its folder behind)."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} already holds files (an earlier grading?); give --out a new or empty folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".writable"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise UserError(f"cannot write grading results to {out}: {e.strerror or e}; give --out a writable folder "
                        "with free space") from None


def _measuring(ex: Exercise, sub: Submission, out: Path, opts: GradeOptions, progress: Progress) -> Measuring:
    """Launchers for the throughput roles: the broken script and the reference assembled by the
    kit, the candidate's submission, and the compute bound run from the kit's own copy of the
    exercise (its model and batches are the kit's, whatever the submission's files say). Every role
    runs with the grading's executor: the ratios compare runs made the same way."""
    m = ex.manifest
    broken = assemble(ex, "broken", None, out / "throughput-broken")
    reference = assemble(ex, "solution", None, out / "throughput-reference")
    dirs = {"broken": broken.dir, "candidate": sub.dir, "reference": reference.dir, "bound": broken.dir}
    bound = m.throughput.bound if m.throughput else None

    def run(role: str, tag: str) -> RunEvidence:
        progress(f"throughput {tag}: {role}")
        return run_role(ex, dirs[role], out / "runs" / f"tp-{tag}-{role}", role, opts.device, m.world_size,
                        script=bound if role == "bound" else None, executor=opts.executor)

    return Measuring(run=run, repeats=opts.repeats, quick=opts.quick_throughput)


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


def regrade(old: GradeResult, ex: Exercise) -> GradeResult:
    """Judge the stored run dirs of an earlier grading again, with the current checks. Run dirs the
    grading sealed must be as sealed: one that changed since is an environment failure (nothing in
    it is judged), and a flag."""
    runs: dict[str, RunEvidence] = {}
    failures: list[str] = []
    flags = list(old.flags)
    for name, d in old.run_dirs.items():
        try:
            runs[name] = load_run(name, Path(d), sealed=old.sealed)
        except TamperedRun as e:
            failures.append(str(e))
            flags.append(Flag(kind="sealed", run=name, what=f"the run dir changed after it was sealed: {e}"))
        except EnvironmentFailure as e:
            failures.append(str(e))
    measurements = dict(old.measurements)
    if "throughput" not in measurements and old.throughput and old.throughput.get("rounds"):
        # a result from before measurements were kept apart: its rounds are in the throughput figures
        rounds = old.throughput["rounds"]
        measurements["throughput"] = {"rounds": rounds, "bound": any("bound" in r for r in rounds),
                                      "quick": "(quick)" in (old.throughput.get("note") or "")}
    env = next((c.message for c in old.checks if c.name == "environment"), None)
    if failures:
        env = "; ".join(failures)
        runs = {}  # a grading with a tampered run is judged from none of its runs
    verdict = judge(ex.manifest, runs, old.submission.protected_changed, measurements, env,
                    isolation=old.isolation)
    res = old.model_copy(update={"measurements": measurements, "flags": flags,
                                 "regraded_at": datetime.now(UTC).isoformat(timespec="seconds")})
    return res.with_verdict(verdict.checks, verdict.score)


__all__ = ["GradeOptions", "grade", "regrade", "plan", "job_rate"]
