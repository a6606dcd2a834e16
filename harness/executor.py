"""How a launch runs its launcher process: plain, as torchrun does, or sandboxed (docs/sandbox.md,
"Wiring"). The one place that knows how the command is wrapped, watched and cleaned up.

An ``Executor`` is chosen once, where a grading or a run starts (``executor_for``), and handed
down as an object: ``LaunchConfig.executor``, the grader's ``GradeOptions.executor``. For each
launch ``harness.launch`` asks it for an ``Execution`` (``prepare``: a sandboxed run needs its own
channel, sampler and work dir per run dir) and calls the same five steps whatever it is:
``environ``, ``start_store``, ``spawn``, ``poll`` and ``close``. ``describe`` is what result.json
records as ``isolation``; ``close`` returns what run.json records as ``sandbox``.
"""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

import psutil

from harness import rundir, sandbox, store_service
from harness.errors import LaunchError
from harness.isolation import IsolatedRun, IsolationConfig
from harness.limits import Limits, Violation
from harness.proctree import ProcessTree
from harness.sandbox import SandboxError

# Plain: how often to look for new descendants. Each look scans the process table on cores the
# ranks are using; anything missed between looks is still found at the end (the tree's env marker).
TREE_REFRESH_S = 1.0
# Sandboxed: an outside sample of every rank at each poll (memory_flat judges from them; a short run
# still gets several). Each look costs 2-3 ms of the parent's time.
OUTSIDE_SAMPLE_S = 0.2


@dataclass(frozen=True)
class RunSpec:
    """What one launch gives its executor: where it records, what it may read and write."""

    kit_root: Path
    run_dir: Path
    key: str  # the run key: whoever signs the records holds it
    cwd: Path  # resolved; sandboxed, the one folder the run may write
    script: Path  # resolved; sandboxed, its folder is readable (read-only)
    gpu: bool
    limits: Limits


@dataclass(frozen=True)
class Description:
    """How the launches of an executor run, as result.json's ``isolation`` records it."""

    kind: str  # sandbox | none
    reason: str | None = None  # none: why
    mode: str | None = None  # sandbox: setuid | userns
    uid: int | None = None  # sandbox: the uid the run has


class Execution(Protocol):
    """One launch's launcher process, from before it starts until everything of it is gone."""

    def environ(self, env: dict[str, str]) -> None:
        """Complete the launcher's environment (in place): where the key and the settings go."""

    def start_store(self, conf: store_service.StoreConfig, cwd: Path) -> store_service.StoreService:
        """Start the kit's artifact store where the ranks can reach it."""

    def spawn(self, cmd: list[str], env: dict[str, str], cwd: Path) -> psutil.Popen:
        """Start the launcher (its stdin a pipe for torchrun's options)."""

    def poll(self, tree: ProcessTree) -> Violation | None:
        """One look from outside while it runs; a limit the run went past ends it."""

    def close(self) -> dict[str, Any] | None:
        """After the tree is gone: what run.json's ``sandbox`` holds (None: not isolated)."""


class Executor(Protocol):
    """How every launch of a grading or a run goes: chosen once, asked by each launch."""

    sandboxed: ClassVar[bool]  # what run.json's ``config.sandbox`` records, and ``--no-sandbox`` says again

    def validate(self, cwd: Path | None, nnodes: int) -> None:
        """Refuse (LaunchError, one line with the fix) a launch this executor cannot run."""

    def refusal(self) -> str | None:
        """Why launches cannot run this way on this machine (one line with the fix); None if they can."""

    def prepare(self, spec: RunSpec) -> Execution:
        """The execution of one launch, ready to spawn; raises LaunchError when it cannot be made."""

    def describe(self) -> Description:
        """What result.json records as ``isolation``."""


@dataclass(frozen=True)
class Plain:
    """The launcher as torchrun starts it: the ranks hold the key and sign their own records, the
    parent scans the machine's process table for the launch's tree."""

    sandboxed: ClassVar[bool] = False

    def validate(self, cwd: Path | None, nnodes: int) -> None:
        pass

    def refusal(self) -> str | None:
        return None

    def prepare(self, spec: RunSpec) -> Execution:
        return PlainRun(spec)

    def describe(self) -> Description:
        p = sandbox.probe()
        return Description(kind="none", reason="graded with --no-sandbox"
                           + ("" if p.ok else f"; {p.reason.split(':')[0]} on this machine"))


class PlainRun:
    def __init__(self, spec: RunSpec):
        self.spec = spec
        self._refreshed = 0.0

    def environ(self, env: dict[str, str]) -> None:
        env[rundir.KEY_ENV] = self.spec.key

    def start_store(self, conf: store_service.StoreConfig, cwd: Path) -> store_service.StoreService:
        return store_service.start(conf, self.spec.run_dir, self.spec.key, cwd)

    def spawn(self, cmd: list[str], env: dict[str, str], cwd: Path) -> psutil.Popen:
        with open(self.spec.run_dir / "launcher.log", "ab") as log:
            return psutil.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.PIPE,
                                cwd=cwd, start_new_session=True)

    def poll(self, tree: ProcessTree) -> Violation | None:
        if time.time() - self._refreshed > TREE_REFRESH_S:
            tree.refresh()
            self._refreshed = time.time()
        return None

    def close(self) -> dict[str, Any] | None:
        return None


@dataclass(frozen=True)
class Sandboxed:
    """The launcher and its ranks in a bubblewrap sandbox (harness.isolation): records over the
    parent's channel, no key in any rank, memory and CPU sampled from outside, ``limits``
    enforced. Needs the launch's ``cwd``: the one folder the run may write."""

    sandboxed: ClassVar[bool] = True

    def validate(self, cwd: Path | None, nnodes: int) -> None:
        if cwd is None:
            raise LaunchError("a sandboxed launch needs a work dir (the one folder the run may write): give cwd")
        if nnodes > 1:
            raise LaunchError("a sandboxed launch has loopback networking only: --nnodes > 1 cannot rendezvous; "
                              "launch without the sandbox")

    def refusal(self) -> str | None:
        p = sandbox.probe()
        return None if p.ok else p.reason

    def prepare(self, spec: RunSpec) -> Execution:
        """The sandbox, channel, sampler and limits of one run, ready to wrap the launcher's command.
        The script's folder is readable (read-only), the work dir the one folder it may write."""
        iso = IsolatedRun(IsolationConfig(kit_root=spec.kit_root, readable=[spec.script.parent], work_dir=spec.cwd,
                                          limits=spec.limits, gpu=spec.gpu, sample_every_s=OUTSIDE_SAMPLE_S),
                          spec.run_dir, spec.key)
        try:
            iso.prepare()
        except SandboxError as e:
            if iso.server is not None:
                iso.server.stop(drain_s=0)
            raise LaunchError(str(e)) from None
        return SandboxedRun(spec, iso)

    def describe(self) -> Description:
        p = sandbox.probe()
        return Description(kind="sandbox", mode=p.mode, uid=sandbox.SANDBOX_UID if p.mode == "setuid" else os.geteuid())


class SandboxedRun:
    def __init__(self, spec: RunSpec, iso: IsolatedRun):
        assert iso.server is not None and iso.policy is not None, "a prepared IsolatedRun has both"
        self.spec, self.iso, self.server, self.policy = spec, iso, iso.server, iso.policy

    def environ(self, env: dict[str, str]) -> None:
        # The parent signs what arrives over the channel: no rank holds the key. The settings are
        # handed to each rank over the channel too: in no environment block.
        env.pop(rundir.KEY_ENV, None)
        self.server.settings = {k: env.pop(k) for k in [k for k in env if rundir.is_setting(k)]}

    def start_store(self, conf: store_service.StoreConfig, cwd: Path) -> store_service.StoreService:
        # the socket in the channel's folder, the one the ranks can reach
        return store_service.start(conf, self.spec.run_dir, self.spec.key, cwd, socket_dir=self.server.dir,
                                   uid=self.policy.run_uid(), visible_dir=sandbox.CHANNEL_MOUNT)

    def spawn(self, cmd: list[str], env: dict[str, str], cwd: Path) -> psutil.Popen:
        try:
            wrapped = self.iso.wrap(cmd, env)
        except SandboxError as e:
            raise LaunchError(str(e)) from None
        proc = psutil.Popen(wrapped.argv, env=wrapped.env, stdout=self.iso.output_fd(), stderr=subprocess.STDOUT,
                            stdin=subprocess.PIPE, cwd=cwd, start_new_session=True)
        self.iso.started(proc.pid)
        return proc

    def poll(self, tree: ProcessTree) -> Violation | None:
        # The PID namespace is the tree (terminate() still scans it once): no periodic psutil scan
        # of every process on the machine.
        return self.iso.poll()

    def close(self) -> dict[str, Any] | None:
        # After the tree is gone: the channel drains to its end, the work dir is sealed against traps.
        return self.iso.close()


def executor_for(sandboxed: bool) -> Executor:
    """The executor a grading or a run asked for (``--no-sandbox``, ``run --sandbox``). Whether the
    sandbox can run here is ``refusal()``'s to say, where the caller refuses in its own words."""
    return Sandboxed() if sandboxed else Plain()
