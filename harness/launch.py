"""Launching a script across ranks with torchrun's semantics and watching it from outside.

The parent never imports torch (start-up stays fast). It starts torchrun's elastic agent itself
(``harness.agent``: rendezvous, restarts and signal handling are torch's own), with
``harness.bootstrap`` as the per-rank entry, then polls the run dir: progress for the live display,
and the hang watchdog. Whatever happens (ok, crash, hang, timeout, Ctrl-C), the whole process tree
is ended and ``run.json`` is written; an outcome is a status, never an exception.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from harness import defaults, fetches, rundir, store_service
from harness.channel import CHANNEL_ENV
from harness.errors import LaunchError
from harness.executor import Executor, Plain, RunSpec
from harness.failure import find_failure, launcher_exit_codes
from harness.filewatch import FileWatch
from harness.injector import FaultInjector
from harness.limits import Limits, Violation
from harness.monitor import Monitor, Snapshot
from harness.observe import observe_rank
from harness.phases import PROFILE_ENV, SCHEDULE
from harness.proctree import ProcessTree
from harness.watchdog import collect_hang

KIT_ROOT = Path(__file__).resolve().parent.parent
STATUSES = ("ok", "failed", "hung", "timeout", "interrupted", "limit")


@dataclass
class Fault:
    """Kill ``rank`` with SIGKILL in ``attempt``: after optimizer step ``step`` (``when="step"``),
    or half-way through the first checkpoint write at or after that step (``when="save"``). The
    rank marks the point; the parent kills its process tree (``harness.injector``)."""

    rank: int
    step: int
    attempt: int = 0
    when: str = "step"


@dataclass
class LaunchConfig:
    script: Path
    script_args: list[str] = field(default_factory=list)
    nproc: int = defaults.NPROC
    nnodes: int = 1
    rdzv_endpoint: str | None = None  # host:port of the c10d rendezvous; standalone when None
    rdzv_id: str = "trainwreck"
    max_restarts: int = 0
    device: str = "auto"  # auto | cpu | cuda
    hang_timeout: float = defaults.HANG_TIMEOUT_S  # a deadlock held this long, after the first step: hung
    startup_timeout: float = defaults.STARTUP_TIMEOUT_S  # the same allowance before the first step of each attempt
    # No progress at all for this long ends the job whatever its ranks do (a straggler outside every
    # collective is otherwise left to come back); None: the process group's own timeout plus a
    # margin (harness.monitor.Monitor.stall_limit), so the watcher never ends what torch would not.
    stall_timeout: float | None = None
    timeout: float | None = None  # wall-clock limit for the whole launch
    # Process-group timeout to supply where the script sets none; None leaves torch's default (30
    # minutes on gloo and NCCL), as torchrun does: the watchdog finds hangs from outside.
    pg_timeout: float | None = None
    run_dir: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)
    cwd: Path | None = None  # where the script runs; None: the caller's directory, as under torchrun
    profile: bool = False  # per-phase step timer and a torch.profiler trace in every rank
    # the kit's artifact store, run as a service outside the ranks for this launch (harness.store_service)
    store: store_service.StoreConfig | None = None
    # How the launcher and its ranks run (harness.executor): Plain, as torchrun does, or Sandboxed
    # (docs/sandbox.md), which enforces ``limits`` and needs ``cwd``: the one folder the run may
    # write. run.json's ``config`` records it as ``sandbox`` (true or false).
    executor: Executor = field(default_factory=Plain)
    limits: Limits = field(default_factory=Limits)
    # files (relative to cwd) the parent watches from outside while the run goes on, keeping each
    # version that appears there (harness.filewatch): checkpoints, whoever writes them
    watch: list[str] = field(default_factory=list)

    def validate(self) -> None:
        if not self.script.is_file():
            raise LaunchError(f"script not found: {self.script} (give the path of a Python file)")
        if self.nproc < 1 or self.nnodes < 1:
            raise LaunchError("--nproc and --nnodes must be at least 1")
        if self.device not in ("auto", "cpu", "cuda"):
            raise LaunchError(f"--device {self.device!r}: use auto, cpu or cuda")
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise LaunchError("--nnodes > 1 needs --rdzv-endpoint HOST:PORT")
        for name in ("hang_timeout", "startup_timeout", "stall_timeout", "pg_timeout"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                raise LaunchError(f"--{name.replace('_', '-')} must be positive")
        if self.store is not None:
            self.store.validate()
        bad = [w for w in self.watch if not w.strip() or Path(w).is_absolute() or ".." in Path(w).parts]
        if bad:
            raise LaunchError(f"watch: {bad[0]!r} is not a path inside the work dir; give it relative to cwd")
        self.executor.validate(self.cwd, self.nnodes)


@dataclass
class RunResult:
    status: str
    run_dir: Path
    world_size: int
    wall_s: float
    exit_code: int | None
    ranks: list[dict[str, Any]]
    hang: dict[str, Any] | None = None
    failure: dict[str, Any] | None = None
    device: str = "cpu"
    gpus: int = 0  # GPUs visible to the ranks (fewer than the ranks: they share them)
    cwd: Path | None = None  # where the script ran
    pg_timeout: dict[str, Any] | None = None  # only when the harness supplied one: see _pg_timeout
    limit: dict[str, Any] | None = None  # status "limit": the limit the run went past (Violation.to_json)
    sandbox: dict[str, Any] | None = None  # what sandbox.json holds; None when the run was not sandboxed
    # every stall that lasted the hang timeout (stragglers the job came back from included): Monitor.stalls
    stalls: list[dict[str, Any]] = field(default_factory=list)
    # what the ranks' DataLoaders fetched, per dataset (harness.fetches.summarise)
    samples: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status, "run_dir": str(self.run_dir), "world_size": self.world_size,
            "wall_s": round(self.wall_s, 3), "device": self.device, "gpus": self.gpus,
            "exit_code": self.exit_code,
            "cwd": str(self.cwd) if self.cwd else None, "pg_timeout": self.pg_timeout,
            "ranks": [{k: r.get(k) for k in RANK_FIELDS} for r in self.ranks],
            "hang": self.hang, "stalls": self.stalls, "failure": self.failure, "limit": self.limit,
            "sandboxed": self.sandbox is not None, "samples": self.samples,
        }


RANK_FIELDS = ("rank", "exit_code", "steps", "steps_per_s", "peak_rss_mb", "last_location",
               "location_kind", "location_op")


def gpu_count() -> int:
    """CUDA devices visible, without importing torch where there is plainly no GPU."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        return 0
    if not (shutil.which("nvidia-smi") or Path("/dev/nvidia0").exists()):
        return 0
    out = subprocess.run([sys.executable, "-c", "import torch;print(torch.cuda.device_count())"],
                         capture_output=True, text=True)
    return int(out.stdout.strip() or 0) if out.returncode == 0 else 0


def resolve_device(requested: str, nproc: int) -> tuple[str, int]:
    """The device the ranks run on and the GPUs they see. ``auto`` takes CUDA only with a GPU per
    rank, as a script that puts rank r on ``cuda:r`` needs; ``cuda`` also runs more ranks than GPUs,
    sharing them (NCCL refuses two ranks on one GPU, so such a script must pick gloo)."""
    if requested == "cpu":
        return "cpu", 0
    n = gpu_count()
    if requested == "cuda":
        if n == 0:
            raise LaunchError("--device cuda needs a GPU, none is visible; use --device cpu")
        return "cuda", n
    return ("cuda", n) if n >= nproc else ("cpu", 0)


def default_run_dir(script: Path) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    return Path("runs") / f"{script.stem}-{stamp}"


# The process the launcher starts, the same for every run: torchrun's options arrive on its stdin
# (harness.agent), so no rank can read its role (--max-restarts) in the agent's /proc cmdline.
AGENT = ["-m", "harness.agent"]


def torchrun_args(cfg: LaunchConfig) -> list[str]:
    """torchrun's options and the per-rank entry, as ``torchrun`` would take them."""
    args = [f"--nproc-per-node={cfg.nproc}", f"--nnodes={cfg.nnodes}", f"--max-restarts={cfg.max_restarts}"]
    if cfg.rdzv_endpoint:
        args += ["--rdzv-backend=c10d", f"--rdzv-endpoint={cfg.rdzv_endpoint}", f"--rdzv-id={cfg.rdzv_id}"]
    else:
        args += ["--standalone"]
    return args + ["-m", "harness.bootstrap", str(cfg.script.resolve()), *cfg.script_args]


def build_command(cfg: LaunchConfig) -> list[str]:
    """The equivalent torchrun command line, for run.json and the reader (the launch itself starts
    ``python -m harness.agent`` and hands it ``torchrun_args`` on stdin)."""
    return [sys.executable, "-m", "torch.distributed.run", *torchrun_args(cfg)]


def build_env(cfg: LaunchConfig, run_dir: Path, device: str) -> dict[str, str]:
    """The launcher's environment before its executor completes it (``Execution.environ``: whether
    the ranks get the key, where the settings go)."""
    env = dict(os.environ)
    env.update(cfg.env)
    env[rundir.RUN_DIR_ENV] = str(run_dir.resolve())
    env.pop(rundir.KEY_ENV, None)  # the executor's to give (a caller's own never reaches a rank)
    env.pop(rundir.PG_TIMEOUT_ENV, None)
    # Whether ranks send over a channel is the launch's to say (the sandbox sets its own): one left
    # in the caller's environment would send an unsandboxed run's records to a server that is gone.
    env.pop(CHANNEL_ENV, None)
    if cfg.pg_timeout is not None:
        env[rundir.PG_TIMEOUT_ENV] = str(cfg.pg_timeout)
    env["TRAINWRECK_FAULTS"] = json.dumps([asdict(f) for f in cfg.faults])
    env.pop(PROFILE_ENV, None)
    if cfg.profile:
        env[PROFILE_ENV] = json.dumps(SCHEDULE)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(KIT_ROOT), env.get("PYTHONPATH")) if p)
    # torch 2.13 + gloo: restarts fail with "connectFullMesh failed" when the rendezvous store is
    # shared with the workers (see DESIGN.md). Only then: otherwise launch exactly as torchrun does.
    if cfg.max_restarts > 0:
        env.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    # OMP_NUM_THREADS is torchrun's to set (1 per rank when there are several per node, none for one):
    # a one-rank job gets the machine's threads, as under torchrun. Gradings fix it (grader.roles).
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def launch(
    cfg: LaunchConfig,
    on_progress: Callable[[Snapshot], None] | None = None,
    poll_s: float = 0.25,
    tee: Callable[[int, str, str], None] | None = None,
) -> RunResult:
    """Run the job to an outcome. ``on_progress`` gets a snapshot per poll; ``tee`` gets each new
    line of every rank's output (they are always in the rank's log files as well)."""
    cfg.validate()
    device, gpus = resolve_device(cfg.device, cfg.nproc)
    run_dir = (cfg.run_dir or default_run_dir(cfg.script)).resolve()
    if (run_dir / "run.json").exists():
        raise LaunchError(f"{run_dir} already holds a run; choose another --run-dir")
    if (why := cfg.executor.refusal()) is not None:
        raise LaunchError(why)
    run_dir.mkdir(parents=True, exist_ok=True)
    if cfg.cwd is not None:
        Path(cfg.cwd).mkdir(parents=True, exist_ok=True)
    key = rundir.new_key()
    started = time.time()
    started_iso = datetime.now(UTC).isoformat(timespec="seconds")
    cmd = [sys.executable, *AGENT]
    cwd = Path(cfg.cwd).resolve() if cfg.cwd is not None else Path.cwd()
    monitor = Monitor(run_dir, startup_timeout=cfg.startup_timeout, hang_timeout=cfg.hang_timeout,
                      key=key, tee=tee, world_size=cfg.nproc * cfg.nnodes, stall_timeout=cfg.stall_timeout)
    status, hang, exit_code = "failed", None, None
    violation: Violation | None = None
    execution = cfg.executor.prepare(RunSpec(kit_root=KIT_ROOT, run_dir=run_dir, key=key, cwd=cwd,
                                             script=cfg.script.resolve(), gpu=device == "cuda", limits=cfg.limits))
    env = build_env(cfg, run_dir, device)
    execution.environ(env)
    store = None
    try:
        if cfg.store:
            store = execution.start_store(cfg.store, cwd)
            env.update(store.env())
        proc = execution.spawn(cmd, env, cwd)
        _hand_args(proc, torchrun_args(cfg))
    except BaseException:
        if store:
            store.stop()
        execution.close()
        raise
    tree = ProcessTree(proc, env_marker=(rundir.RUN_DIR_ENV, str(run_dir)))
    watch = FileWatch(run_dir, key, cwd, cfg.watch) if cfg.watch else None
    injector = FaultInjector(cfg.faults) if cfg.faults else None
    prev_term = _raise_on_sigterm()
    try:
        while True:
            exit_code = proc.poll()
            snap = monitor.poll()  # after the exit check: the last lines are read even on the final pass
            if injector is not None:
                injector.poll(monitor.ranks)
            if watch is not None:
                watch.poll()
            if on_progress:
                on_progress(snap)
            if exit_code is not None:
                status = "ok" if exit_code == 0 else "failed"
                break
            if (violation := execution.poll(tree)) is not None:
                status = "limit"
                break
            if cfg.timeout and time.time() - started > cfg.timeout:
                status = "timeout"
                if monitor.reported_stall() is not None:  # the report says what held the job when time ran out
                    hang = collect_hang(run_dir, monitor, script=cfg.script.resolve(), ended_by="time limit")
                break
            if (ended_by := monitor.ended_by()) is not None:
                hang = collect_hang(run_dir, monitor, script=cfg.script.resolve(), ended_by=ended_by)
                status = "hung"
                break
            try:  # returns at once when the launcher exits: no poll interval added to every run
                proc.wait(timeout=poll_s)
            except psutil.TimeoutExpired:
                pass
    except KeyboardInterrupt:
        status = "interrupted"
    finally:
        # A second Ctrl-C (or SIGTERM) while we clean up must not leave ranks running or the run
        # unrecorded: both are ignored until run.json is written.
        prev_int = _ignore(signal.SIGINT)
        _ignore(signal.SIGTERM)
        try:
            tree.terminate()
            monitor.end_stall(time.time(), "the end of the run")
            if store:  # after the ranks: what they sent has arrived; store.jsonl ends with store_stop
                store.stop()
            if exit_code is None:
                exit_code = proc.poll()  # how the launcher ended when we ended it (None: not known)
            if watch is not None:  # what the run left there at its end
                watch.close()
            if store and watch is not None:  # the store's copies of watched files: on disk once
                store_service.share_copies(run_dir, key)
            summary = execution.close()  # after the tree is gone, before _finish reads what the ranks sent
            if injector is not None:  # a bypassed kill the polls never caught, from the records all in
                injector.settle(lambda r: rundir.read_records(rundir.rank_dir(run_dir, r) / rundir.EVENTS, key).valid)
            result = _finish(cfg, run_dir, key, status, exit_code, started, started_iso, hang, device, cwd,
                             violation, summary, gpus, monitor.stalls,
                             injector.to_json() if injector is not None else None)
        finally:
            _restore(signal.SIGTERM, prev_term)
            _restore(signal.SIGINT, prev_int)
    return result


def _finish(cfg, run_dir, key, status, exit_code, started, started_iso, hang, device, cwd,
            violation: Violation | None = None, sandbox_json: dict[str, Any] | None = None, gpus: int = 0,
            stalls: list[dict[str, Any]] | None = None,
            faults_injected: list[dict[str, Any]] | None = None) -> RunResult:
    world_size = cfg.nproc * cfg.nnodes
    observed = [observe_rank(run_dir, r, key) for r in rundir.ranks_in(run_dir)]
    failure = find_failure(run_dir, observed) if status == "failed" else None
    log = run_dir / "launcher.log"
    codes, _ = launcher_exit_codes(log.read_text(errors="replace") if log.exists() else "")
    blocked = {r["rank"]: r for r in hang["ranks"]} if hang else {}
    ranks = []
    for obs in observed:
        r = obs.public()
        if r["exit_code"] is None:  # no exit record: the launcher knows how it ended (-9: SIGKILL)
            r["exit_code"] = codes.get(obs.rank)
        r["location_op"] = None
        stuck = blocked.get(obs.rank)
        if stuck and stuck["blocked_at"]:  # hung: the line its stack shows it waiting on
            r["last_location"], r["location_kind"] = stuck["blocked_at"], "blocked"
            r["location_op"] = (stuck["pending_collective"] or {}).get("op")
        elif obs.location_kind in ("pending collective", "failed collective"):
            r["location_op"] = (obs.pending_collective or {}).get("op")
        elif obs.location_kind == "last collective":
            r["location_op"] = (obs.last_collective or {}).get("op")
        r["last_location"] = display_path(r["last_location"])
        ranks.append(r)
    result = RunResult(status=status, run_dir=run_dir, world_size=world_size,
                       wall_s=time.time() - started, exit_code=exit_code,
                       ranks=ranks, hang=hang, failure=failure, device=device, gpus=gpus, cwd=cwd,
                       pg_timeout=_pg_timeout(cfg, run_dir, key),
                       limit=violation.to_json() if violation else None, sandbox=sandbox_json,
                       stalls=list(stalls or []), samples=fetches.summarise(run_dir, key))
    cfg_json = _config_json(cfg)
    rundir.atomic_write_json(run_dir / "run.json", {
        "schema_version": rundir.RUN_SCHEMA_VERSION, "key": key, "started_at": started_iso,
        "command": build_command(cfg), "config": cfg_json, **result.to_json(),
        "sandbox": sandbox_json if sandbox_json is not None else {"isolated": False},
        **({"faults_injected": faults_injected} if faults_injected is not None else {}),
    })
    return result


def _config_json(cfg: LaunchConfig) -> dict[str, Any]:
    """run.json's ``config``: the launch's settings, its executor as the ``sandbox`` flag run dirs have
    always recorded (docs/run-dir.md), in the same place."""
    out: dict[str, Any] = {}
    for k, v in asdict(cfg).items():
        if k == "executor":
            out["sandbox"] = cfg.executor.sandboxed
        else:
            out[k] = str(v) if isinstance(v, Path) else v
    return out


def _hand_args(proc: psutil.Popen, args: list[str]) -> None:
    """torchrun's options to the agent on its stdin, then EOF. An agent that died before reading
    them leaves a broken pipe here: its exit is the outcome the loop below reports."""
    try:
        proc.stdin.write(json.dumps(args).encode())
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            proc.stdin.close()


def _pg_timeout(cfg: LaunchConfig, run_dir: Path, key: str) -> dict[str, Any] | None:
    """When the launch asked for a process-group timeout: its value, and the ranks whose script set
    none, so that the harness's value was the one applied (from the signed ``pg_init`` records)."""
    if cfg.pg_timeout is None:
        return None
    applied = []
    for r in rundir.ranks_in(run_dir):
        events = rundir.read_records(rundir.rank_dir(run_dir, r) / rundir.EVENTS, key).valid
        if any(e.get("kind") == "pg_init" and e.get("timeout_by") == "harness" for e in events):
            applied.append(r)
    return {"s": cfg.pg_timeout, "applied_on_ranks": applied}


def display_path(site: str | None) -> str | None:
    """``file:line`` relative to the current directory when the file is under it."""
    if not site:
        return site
    try:
        return str(Path(site).relative_to(Path.cwd()))
    except ValueError:
        return site


def _raise_on_sigterm():
    """Treat SIGTERM like Ctrl-C so the process tree is ended and the run recorded."""
    def handler(signum, frame):
        raise KeyboardInterrupt
    try:
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        return None


def _ignore(sig: int):
    try:
        return signal.signal(sig, signal.SIG_IGN)
    except ValueError:  # not the main thread: signals go to the main thread anyway
        return None


def _restore(sig: int, prev) -> None:
    if prev is not None:
        signal.signal(sig, prev)
