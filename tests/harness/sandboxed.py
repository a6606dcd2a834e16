"""What ``harness.launch`` does once wired to ``harness.isolation`` (docs/sandbox.md, "Wiring"),
in miniature, for the sandbox's tests: the elastic launcher in a sandbox, the channel's stand-in
bootstrap as each rank's entry, the parent polling its limits, the whole tree ended at the end."""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from harness import rundir
from harness.isolation import IsolatedRun, IsolationConfig
from harness.limits import Limits, Violation
from harness.proctree import ProcessTree
from tests.conftest import FIXTURES, REPO

HOSTILE = FIXTURES / "hostile"
BOOT = HOSTILE / "_boot.py"


@dataclass
class SandboxedRun:
    status: str  # ok | failed | timeout | limit
    exit_code: int | None
    run_dir: Path
    work_dir: Path
    key: str
    violation: Violation | None
    summary: dict
    wall_s: float
    bwrap_pid: int

    def records(self, rank: int, name: str = rundir.EVENTS) -> rundir.Records:
        return rundir.read_records(rundir.rank_dir(self.run_dir, rank) / name, self.key)

    def log(self, rank: int, name: str = rundir.STDERR) -> str:
        p = rundir.rank_dir(self.run_dir, rank) / name
        return p.read_text(errors="replace") if p.exists() else ""

    @property
    def launcher_log(self) -> str:
        p = self.run_dir / "launcher.log"
        return p.read_text(errors="replace") if p.exists() else ""


def launcher_cmd(script: Path, args: list[str], nproc: int, boot: bool = True, max_restarts: int = 0) -> list[str]:
    entry = [str(BOOT), str(script)] if boot else [str(script)]
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
            f"--max-restarts={max_restarts}", *entry, *args]


def run_sandboxed(tmp_path: Path, script: str | Path, *args: str, nproc: int = 2,
                  limits: Limits | None = None, timeout: float = 120.0, boot: bool = True,
                  readable: list[Path] | None = None, direct: bool = False, max_restarts: int = 0,
                  env: dict[str, str] | None = None) -> SandboxedRun:
    """``direct``: run the script itself as the sandbox's first process, without the elastic
    launcher (no torch: a fraction of a second), for what does not need ranks."""
    script = Path(script) if Path(script).is_absolute() else HOSTILE / script
    run_dir, work = tmp_path / "run", tmp_path / "run" / "work"
    key = rundir.new_key()
    iso = IsolatedRun(IsolationConfig(kit_root=REPO, readable=readable or [FIXTURES], work_dir=work,
                                      limits=limits or Limits()), run_dir, key)
    iso.prepare()
    env = {"TRAINWRECK_PG_TIMEOUT": "30", "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
           "PYTHONUNBUFFERED": "1", "TRAINWRECK_RUN_DIR": str(run_dir), **(env or {})}
    if max_restarts:  # as launch does: gloo restarts need the store unshared (DESIGN.md)
        env.setdefault("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    cmd = [sys.executable, str(script), *args] if direct else launcher_cmd(script, list(args), nproc, boot,
                                                                           max_restarts)
    wrapped = iso.wrap(cmd, env)
    out = iso.output_fd()
    t0 = time.time()
    proc = psutil.Popen(wrapped.argv, env=wrapped.env, stdout=out, stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL, start_new_session=True)
    iso.started(proc.pid)
    tree = ProcessTree(proc)
    status, violation, code = "failed", None, None
    try:
        while True:
            code = proc.poll()
            violation = iso.poll()
            if code is not None:
                status = "ok" if code == 0 else "failed"
                break
            if violation is not None:
                status = "limit"
                break
            if time.time() - t0 > timeout:
                status = "timeout"
                break
            # No periodic tree.refresh() as launch does without a sandbox: the PID namespace is
            # the tree (terminate() still scans once, to SIGTERM everything before the SIGKILL).
            try:
                proc.wait(timeout=0.25)
            except psutil.TimeoutExpired:
                pass
    finally:
        tree.terminate()
        summary = iso.close()
    return SandboxedRun(status, code, run_dir, work, key, violation, summary, time.time() - t0, proc.pid)
