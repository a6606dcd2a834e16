"""One sandboxed run, put together for the launcher: the sandbox, the channel's server, the outside
sampler and the limits, behind five calls (``prepare``, ``wrap``, ``started``, ``poll``, ``close``),
for the ``Sandboxed`` executor (``harness.executor``), which is all ``harness.launch`` sees of it
(docs/sandbox.md, "Wired").

What it writes in the run dir, all of it by the parent:

- ``ranks/<r>/*.jsonl``, ``*.log``, ``stacks.txt``, ``final_params.safetensors``: what the ranks sent over the
  channel, records signed with the run key, as in docs/run-dir.md;
- ``ranks/<r>/proc.jsonl``: signed outside samples of each rank (RSS, the memory its process tree holds,
  CPU time, threads, processes);
- ``launcher.log``: the elastic launcher's output, through a pipe, capped like a rank's log;
- ``channel.json``: what the channel received, dropped and refused;
- ``sandbox.json``: the policy the run had, the limits, every limit it went past, the processes that
  left the launcher's tree (ended on sight), what was removed from the work dir before anything
  reads it (FIFOs, sockets, symlinks out of it: ``harness.sandbox.seal``), and ``isolated: true``.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from harness import rundir
from harness.channel_server import ChannelServer, ServerLimits
from harness.limits import MB, LimitGuard, Limits, Violation
from harness.procwatch import ProcWatch, cmdline
from harness.sandbox import SandboxError, SandboxPolicy, Wrapped, build, prepare_writable, probe, seal

PROC_SAMPLES = "proc.jsonl"
SANDBOX_FILE = "sandbox.json"
LAUNCHER_LOG = "launcher.log"


@dataclass
class IsolationConfig:
    kit_root: Path
    readable: list[Path]  # the submission's folder
    work_dir: Path  # fresh per run, writable, the ranks' cwd
    limits: Limits = field(default_factory=Limits)
    uid: int | None = None
    gpu: bool = False
    sample_every_s: float = 0.5  # outside samples written per rank
    disk_every_s: float = 0.5  # at least; slower when the walk itself is slow (many files)


class IsolatedRun:
    def __init__(self, cfg: IsolationConfig, run_dir: Path, key: str):
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.key = key
        self.policy: SandboxPolicy | None = None
        self.server: ChannelServer | None = None
        self.watch: ProcWatch | None = None
        self.guard = LimitGuard(cfg.limits, [cfg.work_dir])
        self.violations: list[Violation] = []
        self.strays: list[dict] = []
        self._proc_writers: dict[int, rundir.RecordWriter] = {}
        self._last_sample = 0.0
        self._last_disk = 0.0
        self._disk_every = cfg.disk_every_s
        self._out_w: int | None = None
        self._drain: threading.Thread | None = None
        self.peak: dict[int, dict] = {}

    # -- before the launch -----------------------------------------------------------------
    def prepare(self) -> None:
        """Raises SandboxError (one line, with the fix) when no sandbox can be built here."""
        p = probe()
        if not p.ok:
            raise SandboxError(p.reason)
        self.policy = SandboxPolicy(kit_root=self.cfg.kit_root, readable=list(self.cfg.readable),
                                    writable=[self.cfg.work_dir], limits=self.cfg.limits,
                                    uid=self.cfg.uid, gpu=self.cfg.gpu, cwd=self.cfg.work_dir)
        prepare_writable(self.cfg.work_dir, self.policy.run_uid())
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.server = ChannelServer(self.run_dir, self.key, self._identify,
                                    ServerLimits(log_bytes=int(self.cfg.limits.log_mb * MB)),
                                    uid=self.policy.run_uid()).start()
        self.policy.channel_dir = self.server.dir

    def wrap(self, cmd: list[str], env: dict[str, str]) -> Wrapped:
        assert self.policy is not None, "prepare() first"
        return build(self.policy, cmd, env)

    def output_fd(self) -> int:
        """The write end of a pipe for the launcher's stdout and stderr; the parent drains it into
        ``launcher.log`` up to the log cap. A pipe, not a file: a rank reopening the launcher's
        fd 1 through /proc gets the pipe too, never an unbounded file of ours."""
        out_r, self._out_w = os.pipe()
        self._drain = threading.Thread(target=self._drain_output, args=(out_r,), name="trainwreck-launcher-log",
                                       daemon=True)
        self._drain.start()
        return self._out_w

    def started(self, pid: int) -> None:
        """``pid``: the bwrap process just started. Closes our copy of the output pipe's write end."""
        self.watch = ProcWatch(pid)
        if self._out_w is not None:
            os.close(self._out_w)
            self._out_w = None

    def _identify(self, pid: int):
        return self.watch.identify(pid) if self.watch is not None else None

    # -- while it runs ---------------------------------------------------------------------
    def poll(self, now: float | None = None) -> Violation | None:
        """One outside look: end strays, sample the ranks, check the limits. Returns the first
        limit the run went past (the caller ends the run with it), else None."""
        if self.watch is None:
            return None
        now = now or time.time()
        self.watch.refresh()
        self._end_strays(self.watch, now)
        found: list[Violation] = []
        write = now - self._last_sample >= self.cfg.sample_every_s
        samples = self.watch.sample(tree_memory=write)
        by_rank = {}
        for s in samples:
            by_rank[s.rank] = (s.tree_rss_mb, s.pid)
            peak = self.peak.setdefault(s.rank, {"rss_mb": 0.0, "tree_rss_mb": 0.0, "cpu_s": 0.0})
            peak["rss_mb"] = max(peak["rss_mb"], s.rss_mb)
            peak["tree_rss_mb"] = max(peak["tree_rss_mb"], s.tree_rss_mb)
            peak["cpu_s"] = max(peak["cpu_s"], s.tree_cpu_s)
        if write:
            self._last_sample = now
            for s in samples:
                self._proc_writer(s.rank).write(s.to_json())
        for v in self.guard.check_memory(by_rank):
            if v.pid is not None:  # (a memory violation names the process it measured)
                self.watch.kill(self.watch.subtree(v.pid))  # at once: it may still be growing
            found.append(v)
        found += self.guard.check_processes(len(self.watch.members()) - 2)  # bwrap's own two
        if now - self._last_disk >= self._disk_every:
            self._last_disk = now
            t = time.perf_counter()
            found += self.guard.check_disk()
            # Between two walks a run can write at disk speed; walk often, but never spend more
            # than a twentieth of the parent's time on it (a run that makes 20,000 files).
            self._disk_every = max(self.cfg.disk_every_s, 20 * (time.perf_counter() - t))
        self.violations += found
        return found[0] if found else None

    def _end_strays(self, watch: ProcWatch, now: float) -> None:
        pids = watch.strays()
        if not pids:
            return
        lines = {pid: cmdline(pid) for pid in pids}
        for pid in watch.kill(pids):
            self.strays.append({"pid": pid, "t": round(now, 3), "cmdline": lines.get(pid, "")})

    def _proc_writer(self, rank: int) -> rundir.RecordWriter:
        w = self._proc_writers.get(rank)
        if w is None:
            w = rundir.RecordWriter(rundir.rank_dir(self.run_dir, rank) / PROC_SAMPLES, self.key)
            self._proc_writers[rank] = w
        return w

    def _drain_output(self, out_r: int) -> None:
        cap, written, dropped = int(self.cfg.limits.log_mb * MB), 0, 0
        with open(self.run_dir / LAUNCHER_LOG, "ab", buffering=0) as log:
            while True:
                chunk = os.read(out_r, 1 << 16)
                if not chunk:
                    break
                room = cap - written
                if room > 0:
                    log.write(chunk[:room])
                    written += min(room, len(chunk))
                if len(chunk) > max(room, 0):
                    if not dropped:
                        log.write(f"\n[trainwreck: launcher.log truncated at {cap >> 20} MiB; "
                                  "the rest was dropped]\n".encode())
                    dropped += len(chunk) - max(room, 0)
        os.close(out_r)
        self._launcher_dropped = dropped

    # -- after ------------------------------------------------------------------------------
    def close(self) -> dict:
        """Once every process of the run is gone: drain the channel, write channel.json and
        sandbox.json. Returns what sandbox.json holds."""
        if self._out_w is not None:
            os.close(self._out_w)
            self._out_w = None
        if self._drain is not None:
            self._drain.join(timeout=5)
        chan = self.server.stop() if self.server is not None else {}
        for w in self._proc_writers.values():
            w.close()
        if self.watch is not None and self.watch.duplicates:
            chan.setdefault("tampering", []).append(
                f"{len(self.watch.duplicates)} process(es) started as a rank and attempt already running")
        sealed = seal(self.cfg.work_dir, os.geteuid() if self.policy and self.policy.run_uid() is not None
                      else None)
        du = self.guard.last_disk
        summary = {
            "isolated": True,
            "mode": probe().mode,
            "uid": self.policy.run_uid() if self.policy else None,
            "readable": [str(p) for p in self.cfg.readable],
            "writable": [str(self.cfg.work_dir)],
            "limits": asdict(self.cfg.limits),
            "violations": [v.to_json() for v in self.violations],
            "strays": self.strays,
            "peak": {str(r): v for r, v in sorted(self.peak.items())},
            "disk": {"bytes": du.bytes, "files": du.files} if du else None,
            "launcher_log_dropped": getattr(self, "_launcher_dropped", 0),
            "removed": [{"path": p, "kind": k} for p, k in sealed.removed],
            "tampering": chan.get("tampering", []),
        }
        rundir.atomic_write_json(self.run_dir / SANDBOX_FILE, summary)
        return summary
