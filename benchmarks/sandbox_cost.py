"""What the sandbox costs (issue 11; goal: under 2 s per graded launch).

    python benchmarks/sandbox_cost.py [--rounds 5] [--fixed-rounds 20] [--steps 12] [--only-job]

1. The fixed cost of the wrapper: ``python -c pass`` bare and inside the sandbox (bwrap, the shim
   that sets limits and drops to the run's uid), interleaved.
2. An honest 2-rank gloo DDP job (tests/fixtures/ddp_ok.py, 12 steps), interleaved ABBA:
   ``harness.launch.launch`` unsandboxed against ``LaunchConfig(executor=Sandboxed())`` (sandbox + channel +
   outside sampler + limits); per-round differences of wall time, and the parent's own CPU time
   (its poll loop, and the channel's thread) per launch.
3. The channel alone, in this process: parent time per record, and log bytes per second.

What a whole grading costs: ``benchmarks/grading_sandbox.py``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness import channel, rundir  # noqa: E402
from harness.channel_server import ChannelServer  # noqa: E402
from harness.executor import executor_for  # noqa: E402
from harness.isolation import IsolatedRun  # noqa: E402
from harness.launch import LaunchConfig, launch  # noqa: E402
from harness.sandbox import SandboxPolicy, build, prepare_writable, probe  # noqa: E402
from tests.conftest import FIXTURES  # noqa: E402

DDP = FIXTURES / "ddp_ok.py"


def cpu_self() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class TreeCPU:
    """CPU time of every process this one starts, sampled every 0.25 s while they live: rusage of
    children does not reach us through bwrap (its init is reaped by the machine's pid 1 once the
    outer bwrap has gone), so both sides are measured this way. Misses at most the last 0.25 s of
    each process, alike for both."""

    def __init__(self):
        import threading

        import psutil

        self._psutil = psutil
        self.seen: dict[tuple[int, float], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        me = self._psutil.Process()
        while not self._stop.wait(0.25):
            for p in me.children(recursive=True):
                try:
                    with p.oneshot():
                        key, c = (p.pid, p.create_time()), p.cpu_times()
                    self.seen[key] = max(self.seen.get(key, 0.0), c.user + c.system)
                except self._psutil.Error:
                    continue

    def total(self) -> float:
        self._stop.set()
        self._thread.join()
        return sum(self.seen.values())


def fixed_cost(rounds: int) -> None:
    py = str(Path(sys.executable).resolve())
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        prepare_writable(work, SandboxPolicy(kit_root=REPO, readable=[], writable=[work]).run_uid())
        wrapped = build(SandboxPolicy(kit_root=REPO, readable=[], writable=[work]), [py, "-c", "pass"])
        bare, inside = [], []
        for _ in range(rounds):
            for name, argv, env in (("bare", [py, "-c", "pass"], None), ("inside", wrapped.argv, wrapped.env)):
                t = time.perf_counter()
                subprocess.run(argv, env=env, check=True)
                (bare if name == "bare" else inside).append(time.perf_counter() - t)
    print(f"1. fixed cost, python -c pass, {rounds} rounds: bare median {statistics.median(bare) * 1e3:.0f} ms, "
          f"inside median {statistics.median(inside) * 1e3:.0f} ms "
          f"(+{(statistics.median(inside) - statistics.median(bare)) * 1e3:.0f} ms)")


def job_cost(rounds: int, steps: int = 12) -> None:
    polls: list[float] = []
    orig_poll = IsolatedRun.poll

    def timed_poll(self, now=None):
        t = time.perf_counter()
        try:
            return orig_poll(self, now)
        finally:
            polls.append(time.perf_counter() - t)

    IsolatedRun.poll = timed_poll
    walls = {"outside": [], "inside": []}
    cpus = {"outside": [], "inside": []}
    jobs = {"outside": [], "inside": []}
    rates = {"outside": [], "inside": []}  # steps/s of the job (the mean of its ranks'), start-up left out
    order = []
    for i in range(rounds):
        order += ["outside", "inside"] if i % 2 == 0 else ["inside", "outside"]
    load0 = os.getloadavg()[0]
    for name in order:
        for _attempt in range(3):  # torchrun --standalone on gloo fails now and then: run again, say so
            with tempfile.TemporaryDirectory() as tmp:
                tmp = Path(tmp)
                c0, tree_cpu, t0 = cpu_self(), TreeCPU(), time.perf_counter()
                res = launch(LaunchConfig(script=DDP, script_args=["--steps", str(steps)], nproc=2,
                                          run_dir=tmp / "run", cwd=tmp / "run" / "work",
                                          executor=executor_for(sandboxed=name == "inside")))
                status, why = res.status, res.failure
                wall, cpu, job = time.perf_counter() - t0, cpu_self() - c0, tree_cpu.total()
            if status == "ok":
                break
            print(f"   {name}: a launch ended {status} ({why}); running it again", flush=True)
        else:
            raise SystemExit(f"{name}: three launches in a row failed")
        walls[name].append(wall)
        cpus[name].append(cpu)
        jobs[name].append(job)
        rates[name].append(statistics.mean(r["steps_per_s"] or 0.0 for r in res.ranks))
        print(f"   {name}: {wall:.2f} s wall, {rates[name][-1]:.1f} steps/s, job CPU {job:.2f} s, parent CPU "
              f"{cpu:.2f} s, load {os.getloadavg()[0]:.1f}", flush=True)
    diffs = [b - a for a, b in zip(walls["outside"], walls["inside"])]
    print(f"2. honest 2-rank gloo DDP job ({steps} steps), {rounds} interleaved rounds (load {load0:.1f} -> "
          f"{os.getloadavg()[0]:.1f}):\n"
          f"   wall median outside {statistics.median(walls['outside']):.2f} s, inside "
          f"{statistics.median(walls['inside']):.2f} s; per-round inside - outside: median "
          f"{statistics.median(diffs):+.2f} s (range {min(diffs):+.2f} .. {max(diffs):+.2f})\n"
          f"   job CPU (every process of the launch) median: outside {statistics.median(jobs['outside']):.2f} s, "
          f"inside {statistics.median(jobs['inside']):.2f} s; per-round median "
          f"{statistics.median([b - a for a, b in zip(jobs['outside'], jobs['inside'])]):+.2f} s\n"
          f"   steps/s (what throughput rounds compare) median: outside {statistics.median(rates['outside']):.1f}, "
          f"inside {statistics.median(rates['inside']):.1f}; per-round inside/outside median "
          f"{statistics.median([b / a for a, b in zip(rates['outside'], rates['inside']) if a]):.3f}\n"
          f"   parent CPU per launch: outside {statistics.median(cpus['outside']):.2f} s, inside "
          f"{statistics.median(cpus['inside']):.2f} s; one outside look (IsolatedRun.poll): median "
          f"{statistics.median(polls) * 1e3:.1f} ms over {len(polls)} looks")


def channel_cost() -> None:
    class Peer:
        rank, attempt = 0, 0

        def __init__(self, pid):
            self.pid = pid

    with tempfile.TemporaryDirectory() as tmp:
        srv = ChannelServer(Path(tmp) / "run", "k" * 32, lambda pid: Peer(pid)).start()
        # This process poses as a sandboxed rank only while it measures: left set, the variable
        # would send the records of every later unsandboxed launch here (part 2 runs after this).
        os.environ[channel.CHANNEL_ENV] = str(srv.path)
        try:
            w = channel.RecordWriter(rundir.EVENTS)
            n = 50_000
            t = time.perf_counter()
            for i in range(n):
                w.write({"kind": "step", "attempt": 0, "step": i, "dt": 0.01, "rss_mb": 300.0, "lr": [0.1]})
            channel._sender.close()
            s = channel.connect("bytes", rundir.STDOUT)
            blob = b"z" * (1 << 20)
            t_log = time.perf_counter()
            for _ in range(256):
                s.sendall(blob)
            s.close()
        finally:
            del os.environ[channel.CHANNEL_ENV]
        srv.stop(drain_s=60)
        t_end = time.perf_counter()
        assert len(rundir.read_records(Path(tmp) / "run" / "ranks" / "0" / rundir.EVENTS, "k" * 32).valid) == n
    print(f"3. channel: {n} step records sent, signed and stored in {t_log - t:.2f} s "
          f"({(t_log - t) / n * 1e6:.0f} us per record, both ends in this process); "
          f"256 MiB of log through the cap (16 MiB kept) in {t_end - t_log:.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--fixed-rounds", type=int, default=20)
    ap.add_argument("--steps", type=int, default=12, help="steps of the DDP job")
    ap.add_argument("--only-job", action="store_true", help="part 2 alone")
    args = ap.parse_args()
    p = probe()
    if not p.ok:
        raise SystemExit(p.reason)
    print(f"sandbox mode: {p.mode}; load average {os.getloadavg()[0]:.1f}", flush=True)
    if not args.only_job:
        fixed_cost(args.fixed_rounds)
        channel_cost()
    job_cost(args.rounds, args.steps)


if __name__ == "__main__":
    main()
