"""The ``trainwreck`` command. Commands stay thin: they parse, call the harness or grader, and hand
results to ``grader.console``. Expected errors are one line and exit 2; tracebacks only with
``--debug`` (or ``TRAINWRECK_DEBUG=1``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from grader import console
from grader.errors import ManifestError
from harness.launch import LaunchConfig, LaunchError, launch
from harness.phases import read_run as read_profile

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


class UserError(Exception):
    """An expected problem with the user's input or environment: one line, exit 2."""


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, envvar="TRAINWRECK_DEBUG", help="Show tracebacks.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """trainwreck: broken distributed-training exercises, a harness that watches every rank, and a grader."""
    ctx.obj = {"debug": debug}


@cli.command("run", context_settings={"ignore_unknown_options": False})
@click.argument("target")
@click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--nproc", type=click.IntRange(min=1), default=None, help="Processes per node (default 2, or the exercise's world size).")
@click.option("--nnodes", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--rdzv-endpoint", default=None, help="HOST:PORT of the c10d rendezvous (needed with --nnodes > 1).")
@click.option("--rdzv-id", default="trainwreck", show_default=True)
@click.option("--max-restarts", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--hang-timeout", type=click.FloatRange(min=0, min_open=True), default=None, help="Seconds without progress on any rank before the job counts as hung (default 15).")
@click.option("--startup-timeout", type=click.FloatRange(min=0, min_open=True), default=None, help="Allowance before the first step (default 120).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None, help="Wall-clock limit for the whole job.")
@click.option("--pg-timeout", type=click.FloatRange(min=0, min_open=True), default=None, help="Process-group timeout (s) to supply where the script's init_process_group gives none (default: none supplied, torch's own applies: 30 min on gloo and NCCL).")
@click.option("--run-dir", type=click.Path(path_type=Path), default=None, help="Where to write the run's artifacts (default runs/<name>-<time>).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout instead of tables.")
@click.option("--tee", is_flag=True, help="Also print every rank's output (to stderr, prefixed with its rank).")
@click.option("--profile", is_flag=True, help="Time each step's phases per rank and write a torch.profiler trace per rank.")
def run_cmd(target, script_args, nproc, nnodes, rdzv_endpoint, rdzv_id, max_restarts, device,
            hang_timeout, startup_timeout, timeout, pg_timeout, run_dir, as_json, tee, profile):
    """Launch TARGET (a script path or an exercise slug) across ranks and observe every rank.

    The script runs in the current directory, as under torchrun: its relative paths (config files,
    data, its own checkpoints) are the caller's. Everything the harness writes goes to the run dir.
    Arguments after `--` go to the script.
    """
    cfg = _config_for(target, list(script_args), nproc=nproc, nnodes=nnodes, rdzv_endpoint=rdzv_endpoint,
                      rdzv_id=rdzv_id, max_restarts=max_restarts, device=device, hang_timeout=hang_timeout,
                      startup_timeout=startup_timeout, timeout=timeout, pg_timeout=pg_timeout,
                      run_dir=run_dir, profile=profile)
    with console.live_progress(enabled=not (as_json or tee)) as on_progress:
        res = launch(cfg, on_progress=on_progress, tee=console.rank_line if tee else None)
    prof = read_profile(res.run_dir) if profile else None
    if as_json:
        console.emit_json({**res.to_json(), **({"profile": prof} if profile else {})})
    else:
        console.run_summary(res)
        if profile:
            console.profile_table(prof)
    sys.exit(EXIT_OK if res.ok else EXIT_FAIL)


def _config_for(target: str, script_args: list[str], **opts) -> LaunchConfig:
    path = Path(target)
    settings: dict = {}
    if path.suffix == ".py" or path.exists():
        if not path.is_file():
            raise UserError(f"script not found: {target} (give a Python file or an exercise slug)")
        script = path
    else:
        from grader.exercises import find  # pydantic: only when a slug is given

        ex = find(target)
        script = ex.script
        run = ex.manifest.run
        settings = {"nproc": ex.manifest.world_size, "hang_timeout": run.hang_timeout,
                    "startup_timeout": run.startup_timeout, "timeout": run.timeout,
                    "pg_timeout": run.pg_timeout}
        script_args = script_args or list(run.args)
    for k, v in opts.items():
        if v is not None:
            settings[k] = v
    settings.setdefault("nproc", 2)
    cfg = LaunchConfig(script=script, script_args=script_args, **settings)
    if cfg.run_dir is None:
        from harness.launch import default_run_dir
        cfg.run_dir = default_run_dir(script)
    return cfg  # cwd None: the script runs where trainwreck was started, as under torchrun


@cli.command("list")
def list_cmd():
    """The exercises, from their manifests."""
    from grader.exercises import discover

    found, errors = discover()
    for e in errors:
        console.warn(e)
    if not found:
        console.text("no exercises found")
        return
    console.table(None, ["slug", "title", "difficulty", "min", "topics", "symptom"],
                  [[e.slug, e.manifest.title, e.manifest.difficulty, e.manifest.minutes,
                    ", ".join(e.manifest.topics), e.manifest.symptom] for e in found])


@cli.command("show")
@click.argument("slug")
def show_cmd(slug):
    """An exercise's facts and its brief."""
    from grader.exercises import find

    ex = find(slug)
    m = ex.manifest
    console.table(m.title, ["fact", "value"], [
        ["slug", m.slug], ["symptom", m.symptom], ["difficulty", m.difficulty],
        ["time budget", f"{m.minutes} min"], ["topics", ", ".join(m.topics)],
        ["world size", m.world_size], ["backends", ", ".join(m.backends)],
        ["entry", m.entry], ["you may edit", ", ".join(m.editable)],
        ["checks", ", ".join(c.name for c in m.checks) + (", throughput" if m.throughput else "")],
    ])
    if ex.brief.exists():
        console.text(ex.brief.read_text())


def main(argv: list[str] | None = None) -> None:
    debug = os.environ.get("TRAINWRECK_DEBUG") == "1" or "--debug" in (argv or sys.argv[1:])
    try:
        cli.main(args=argv, standalone_mode=False, prog_name="trainwreck")
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        console.error("aborted")
        sys.exit(130)
    except click.ClickException as e:
        console.error(e.format_message() + _usage_hint(e))
        sys.exit(EXIT_USAGE)
    except (UserError, ManifestError, LaunchError) as e:
        if debug:
            raise
        console.error(str(e))
        sys.exit(EXIT_USAGE)
    except KeyboardInterrupt:
        console.error("interrupted")
        sys.exit(130)
    except Exception as e:  # an environment failure or a bug in trainwreck, not the user's input
        if debug:
            raise
        console.error(f"internal error: {type(e).__name__}: {e} (rerun with --debug for the traceback)")
        sys.exit(EXIT_USAGE)


def _usage_hint(e: click.ClickException) -> str:
    ctx = getattr(e, "ctx", None)
    return f" (see `{ctx.command_path} --help`)" if ctx is not None else ""


from grader.cli_grading import COMMANDS  # noqa: E402  (registered after the core commands)

for _command in COMMANDS:
    cli.add_command(_command)


if __name__ == "__main__":
    main()
