"""``trainwreck run TARGET``: launch a script (or an exercise's broken script) across ranks the way
torchrun does and watch every rank from outside. Imports neither pydantic nor the grading modules
unless TARGET is an exercise slug."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from grader import console
from grader.commands._options import device_option
from grader.errors import EXIT_FAIL, EXIT_OK, UserError
from harness import defaults
from harness.executor import executor_for
from harness.launch import KIT_ROOT, LaunchConfig, default_run_dir, launch
from harness.phases import read_run as read_profile


@click.command("run", context_settings={"ignore_unknown_options": False})
@click.argument("target", required=False)
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--nproc", type=click.IntRange(min=1), default=None,
              help=f"Processes per node (default {defaults.NPROC}, or the exercise's world size).")
@click.option("--nnodes", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--rdzv-endpoint", default=None, help="HOST:PORT of the c10d rendezvous (needed with --nnodes > 1).")
@click.option("--rdzv-id", default="trainwreck", show_default=True)
@click.option("--max-restarts", type=click.IntRange(min=0), default=0, show_default=True)
@device_option
@click.option("--hang-timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              help=f"Seconds a deadlock (every rank waiting in a collective that cannot complete) must last before "
                   f"the job is ended as hung (default {defaults.HANG_TIMEOUT_S:g}). A rank outside every collective "
                   f"(sleeping, reading, in I/O) while others wait for it is a straggler: reported once it has "
                   f"lasted this long, and left to go on.")
@click.option("--startup-timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              help=f"The hang timeout before the first step, for a deadlock and for reporting a straggler "
                   f"(default {defaults.STARTUP_TIMEOUT_S:g}).")
@click.option("--stall-timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Seconds without progress of any kind after which the job is ended whatever its ranks are "
                   "doing, a straggler included (default: the process group's own timeout plus "
                   f"{defaults.STALL_MARGIN_S:g} s: 30 min on gloo, 10 min on NCCL, unless the script sets another).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Wall-clock limit for the whole job.")
@click.option("--pg-timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Process-group timeout (s) to supply where the script's init_process_group gives none "
                   "(default: none supplied, torch's own applies: 30 min on gloo and NCCL).")
@click.option("--run-dir", type=click.Path(path_type=Path), default=None,
              help="Where to write the run's artifacts (default runs/<name>-<time>, in a practice workspace's root "
                   "when run inside one).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout instead of tables.")
@click.option("--tee", is_flag=True, help="Also print every rank's output (to stderr, prefixed with its rank).")
@click.option("--profile", is_flag=True,
              help="Time each step's phases per rank and write a torch.profiler trace per rank.")
@click.option("--sandbox", is_flag=True,
              help="Run it as gradings run a candidate's code: in a bubblewrap sandbox, in a fresh work dir "
                   "(<run-dir>/work) with the script's folder read-only, records signed by the parent, "
                   "memory and disk limits enforced.")
def command(target, script_args, nproc, nnodes, rdzv_endpoint, rdzv_id, max_restarts, device,
            hang_timeout, startup_timeout, stall_timeout, timeout, pg_timeout, run_dir, as_json, tee, profile, sandbox):
    """Launch TARGET (a script path or an exercise slug) across ranks and observe every rank.

    The script runs in the current directory, as under torchrun: its relative paths (config files,
    data, its own checkpoints) are the caller's. Everything the harness writes goes to the run dir.
    Arguments after `--` go to the script. Inside a practice or session workspace TARGET may be
    left out: the workspace's script, your copy, runs as the grader runs it (the exercise's world
    size, arguments and timeouts); naming that script or the workspace's exercise slug does the
    same (options such as --nproc still apply) and lets arguments follow `--`. With --sandbox it
    runs unseen by the rest of the machine, as a grading runs it, in <run-dir>/work.
    """
    cfg = _config_for(target, list(script_args), nproc=nproc, nnodes=nnodes, rdzv_endpoint=rdzv_endpoint,
                      rdzv_id=rdzv_id, max_restarts=max_restarts, device=device, hang_timeout=hang_timeout,
                      startup_timeout=startup_timeout, stall_timeout=stall_timeout, timeout=timeout,
                      pg_timeout=pg_timeout, run_dir=run_dir, profile=profile)
    cfg.executor = executor_for(sandboxed=sandbox)
    if (why := cfg.executor.refusal()) is not None:
        raise UserError(why.replace("grade with --no-sandbox (unisolated)", "run without --sandbox"))
    if cfg.executor.sandboxed:  # the one folder a sandboxed run may write: <run-dir>/work, outside the kit
        run_dir = cfg.run_dir
        assert run_dir is not None, "_config_for always sets the run dir"
        where = run_dir.resolve()
        if KIT_ROOT in where.parents and KIT_ROOT / ".trainwreck" not in where.parents:
            raise UserError(f"--sandbox: the run dir {where} is inside the kit, where a sandboxed run may not write; "
                            "give --run-dir a folder outside it")
        cfg.cwd = run_dir / "work"
    with console.live_progress(enabled=not (as_json or tee)) as on_progress:
        res = launch(cfg, on_progress=console.stall_notices(on_progress), tee=console.rank_line if tee else None)
    prof = read_profile(res.run_dir) if profile else None
    if as_json:
        console.emit_json({**res.to_json(), **({"profile": prof} if profile else {})})
    else:
        console.run_summary(res)
        if prof is not None:  # read when --profile was given
            console.profile_table(prof)
    sys.exit(EXIT_OK if res.ok else EXIT_FAIL)


def _config_for(target: str | None, script_args: list[str], **opts) -> LaunchConfig:
    settings: dict = {}
    runs_under = Path(".")
    practice = _practice_script(target)
    if practice is not None:
        script, settings, args, runs_under = practice
        script_args = script_args or args
    elif target is None:
        raise UserError("give TARGET (a script or an exercise slug), or run `trainwreck run` inside a practice "
                        "workspace (`trainwreck start SLUG` makes one)")
    elif (path := Path(target)).suffix == ".py" or path.exists():
        if not path.is_file():
            raise UserError(f"script not found: {target} (give a Python file or an exercise slug)")
        script = path
    else:
        from grader.exercises import find_script as find  # pydantic: only when a slug is given

        ex = find(target)
        script = ex.script
        run = ex.manifest.run
        settings = {"nproc": ex.manifest.world_size, "hang_timeout": run.hang_timeout,
                    "startup_timeout": run.startup_timeout, "timeout": run.timeout,
                    "pg_timeout": run.pg_timeout, "store": run.store.launch_config() if run.store else None}
        script_args = script_args or list(run.args)
    for k, v in opts.items():
        if v is not None:
            settings[k] = v
    settings.setdefault("nproc", defaults.NPROC)
    cfg = LaunchConfig(script=script, script_args=script_args, **settings)
    if cfg.run_dir is None:
        cfg.run_dir = runs_under / default_run_dir(script)
    return cfg  # cwd None: the script runs where trainwreck was started, as under torchrun


def _workspace(here: Path, strict: bool) -> tuple[str, Path, bool, bool] | None:
    """The workspace holding ``here``: its exercise slug, its root, whether it is a design
    scenario's and whether it is a practice one; the nearer of a practice workspace (`trainwreck
    start`) and a session workspace (`trainwreck session new`), as `grade` picks; None outside both.
    A practice state file that cannot be read is an error when ``strict``, else no workspace. No
    pydantic: the state file and the session marker are read as JSON."""
    from grader.practice.state import PracticeError, find_root, load
    from grader.sessions.workspace import find_marker

    practice, marker = find_root(here), find_marker(here)
    if practice is not None and (marker is None or len(practice.parts) > len(marker.dir.parts)):
        try:
            state = load(practice)
        except PracticeError:
            if strict:
                raise
            return None  # a script named outright runs whatever the workspace's state file says
        return state.exercise, practice, state.kind == "scenario", True
    return None if marker is None else (marker.exercise, marker.dir, False, False)


def _practice_script(target: str | None) -> tuple[Path, dict, list[str], Path] | None:
    """Inside a practice or session workspace, with no TARGET, TARGET the workspace's exercise slug
    (what its brief and hints print) or TARGET naming the workspace's own script: that script, the
    candidate's copy, with the exercise's world size, arguments and timeouts, and the workspace's
    root (its runs go in its runs/ folder, wherever in it the command was typed); otherwise None
    (another exercise's slug runs that exercise's shipped script)."""
    found = _workspace(Path.cwd(), strict=target is None)
    if found is None:
        return None
    slug, root, scenario, practice = found
    if target is not None and target != slug and not Path(target).is_file():
        return None
    if scenario:
        if target is not None:
            return None
        from grader.practice.workspace import open_workspace

        open_workspace(root).require_script("run")
    from grader.exercises import find_script

    ex = find_script(slug)
    script = (root / ex.manifest.entry).resolve()
    if target not in (None, slug) and Path(target).resolve() != script:
        return None
    if not script.is_file():
        raise UserError(f"{script} is missing; " + ("`trainwreck reset` puts the shipped one back" if practice else
                        f"copy the shipped one back from the kit's exercises/{slug}/"))
    if target == slug:
        console.info(f"running this workspace's {ex.manifest.entry}, not the shipped one:\n  {script}")
    run = ex.manifest.run
    settings = {"nproc": ex.manifest.world_size, "hang_timeout": run.hang_timeout,
                "startup_timeout": run.startup_timeout, "timeout": run.timeout, "pg_timeout": run.pg_timeout,
                "store": run.store.launch_config() if run.store else None}
    return script, settings, list(run.args), root
