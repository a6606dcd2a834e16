"""Harness overhead: the same plain DDP job through `trainwreck run` and through bare torchrun,
interleaved (bare, harness, harness, bare, ...), medians of wall time, of the job's steps/s and of
the CPU time of the whole process tree. Goal (issue 2): at most 10% more wall time and at most 5%
fewer steps/s.

    python benchmarks/harness_overhead.py [--runs 5] [--nproc 2] [--grading-evidence]

``--grading-evidence`` adds a third launcher, interleaved with the other two: ``trainwreck run`` with
the evidence every grading run records and a plain run leaves out (the work behind each step and the
memory counts, ``TRAINWRECK_GRADING_EVIDENCE=1``).

Steps/s is what benchmarks/ddp_bench.py measures about itself (rank 0, after warm-up): the same
measurement with and without the harness. On a shared machine wall time drifts with other
people's load, so the per-round ratios (each harness run against the bare run next to it) are
reported beside the ratio of medians, and the machine's load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from harness.rundir import GRADING_EVIDENCE_ENV  # noqa: E402  (the kit, from this checkout)

GRADED = "+ grading evidence"
SCRIPT = HERE / "ddp_bench.py"
RATE = re.compile(r"steps_per_s=([0-9.]+)")


@dataclass
class Run:
    wall_s: float
    cpu_s: float  # user + system time of every process of the launch (all are waited for)
    steps_per_s: float


FAILED: dict[str, int] = {}  # launches that failed and were run again, by launcher


def timed(cmd: Callable[[], list[str]], cwd: Path | None = None, name: str = "",
          env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """``cmd`` is called once per try: a retried launch gets a fresh run dir."""
    for _attempt in range(3):  # torchrun --standalone itself fails now and then on gloo: run again, say so
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        p = subprocess.run(cmd(), capture_output=True, text=True, cwd=cwd, env=env)
        wall = time.perf_counter() - t
        if p.returncode == 0:
            break
        FAILED[name] = FAILED.get(name, 0) + 1
        tail = (p.stderr.strip().splitlines() or ["(no output)"])[-1]
        try:  # `trainwreck run --json` says which rank failed and why
            failure = json.loads(p.stdout).get("failure") or {}
            tail = f"{failure.get('reason')}: {(failure.get('error') or '').splitlines()[-1:]}"
        except ValueError:
            pass
        print(f"{name}: a launch failed (exit {p.returncode}: {tail[:300]}); running it again",
              file=sys.stderr, flush=True)
    else:
        raise SystemExit(f"{name}: three launches in a row failed; see the error above")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, p.stdout


def bare(nproc: int, _tmp: Path) -> Run:
    wall, cpu, out = timed(lambda: [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                    f"--nproc-per-node={nproc}", str(SCRIPT)], name="torchrun")
    return Run(wall, cpu, float(RATE.search(out).group(1)))


def harness(nproc: int, tmp: Path, grading: bool = False) -> Run:
    dirs: list[Path] = []
    env = {**os.environ, GRADING_EVIDENCE_ENV: "1"} if grading else None

    def cmd() -> list[str]:
        dirs.append(Path(tempfile.mkdtemp(dir=tmp)) / "run")
        return [sys.executable, "-m", "grader.cli", "run", str(SCRIPT), "--nproc", str(nproc), "--json",
                "--run-dir", str(dirs[-1])]

    wall, cpu, _ = timed(cmd, cwd=HERE.parent, name="trainwreck run", env=env)
    return Run(wall, cpu, float(RATE.search((dirs[-1] / "ranks" / "0" / "stdout.log").read_text()).group(1)))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--grading-evidence", action="store_true",
                    help="also run trainwreck run with the evidence gradings record (a third launcher)")
    args = ap.parse_args()
    launchers: list[tuple[str, Callable[[int, Path], Run]]] = [("torchrun", bare), ("trainwreck run", harness)]
    if args.grading_evidence:
        launchers.append((GRADED, lambda n, t: harness(n, t, grading=True)))
    res: dict[str, list[Run]] = {name: [] for name, _ in launchers}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        bare(args.nproc, Path(tmp))  # warm-up: page cache, compiled bytecode
        for i in range(args.runs):
            # Alternate the order, so a slow drift of the machine's load favours none.
            for name, fn in launchers if i % 2 == 0 else launchers[::-1]:
                res[name].append(fn(args.nproc, Path(tmp)))
            print(f"round {i + 1}/{args.runs}", file=sys.stderr, flush=True)
    load_after = os.getloadavg()

    def med(name: str, field: str) -> float:
        return statistics.median(getattr(r, field) for r in res[name])

    print(f"{args.runs} interleaved runs each, {args.nproc} ranks, {os.cpu_count()} CPUs; load average "
          f"{load_before[0]:.1f} before, {load_after[0]:.1f} after")
    print(f"{'launcher':18} {'wall s':>8} {'steps/s':>8} {'CPU s':>8}   (medians)   runs: wall s / steps/s")
    for name, runs in res.items():
        print(f"{name:18} {med(name, 'wall_s'):8.2f} {med(name, 'steps_per_s'):8.1f} {med(name, 'cpu_s'):8.2f}"
              f"                " + ", ".join(f"{r.wall_s:.1f}/{r.steps_per_s:.0f}" for r in runs))
    b = "torchrun"
    for h in [name for name, _ in launchers if name != b]:
        paired_wall = statistics.median(x.wall_s / y.wall_s for x, y in zip(res[h], res[b])) - 1
        paired_rate = 1 - statistics.median(x.steps_per_s / y.steps_per_s for x, y in zip(res[h], res[b]))
        print(f"{h}: overhead, ratio of medians:        {med(h, 'wall_s') / med(b, 'wall_s') - 1:+.1%} wall "
              f"time (goal ≤ +10%), {1 - med(h, 'steps_per_s') / med(b, 'steps_per_s'):+.1%} fewer steps/s "
              f"(goal ≤ 5%), {med(h, 'cpu_s') / med(b, 'cpu_s') - 1:+.1%} CPU time")
        print(f"{h}: overhead, median per-round ratio:  {paired_wall:+.1%} wall time, "
              f"{paired_rate:+.1%} fewer steps/s")
    if FAILED:
        print("launches that failed and were run again: " + ", ".join(f"{k} {v}" for k, v in FAILED.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
