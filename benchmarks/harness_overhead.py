"""Harness overhead: the same plain DDP job through `trainwreck run` and through bare torchrun,
interleaved (bare, harness, bare, harness, ...), medians of wall time and of the job's own
steps/s. Goal (issue 2): at most 10% more wall time and at most 5% fewer steps/s.

    python benchmarks/harness_overhead.py [--runs 5] [--nproc 2]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "ddp_bench.py"
RATE = re.compile(r"steps_per_s=([0-9.]+)")


def bare(nproc: int, _tmp: Path) -> tuple[float, float]:
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                        f"--nproc-per-node={nproc}", str(SCRIPT)], capture_output=True, text=True, check=True)
    return time.perf_counter() - t, float(RATE.search(p.stdout).group(1))


def harness(nproc: int, tmp: Path) -> tuple[float, float]:
    run_dir = Path(tempfile.mkdtemp(dir=tmp)) / "run"
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "grader.cli", "run", str(SCRIPT), "--nproc", str(nproc), "--json",
                    "--run-dir", str(run_dir)], capture_output=True, text=True, check=True, cwd=HERE.parent)
    wall = time.perf_counter() - t
    return wall, float(RATE.search((run_dir / "ranks" / "0" / "stdout.log").read_text()).group(1))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--nproc", type=int, default=2)
    args = ap.parse_args()
    res = {"torchrun": [], "trainwreck run": []}
    with tempfile.TemporaryDirectory() as tmp:
        bare(args.nproc, Path(tmp))  # warm-up: page cache, compiled bytecode
        for i in range(args.runs):
            res["torchrun"].append(bare(args.nproc, Path(tmp)))
            res["trainwreck run"].append(harness(args.nproc, Path(tmp)))
            print(f"round {i + 1}/{args.runs}", file=sys.stderr, flush=True)
    med = {k: (statistics.median(w for w, _ in v), statistics.median(s for _, s in v)) for k, v in res.items()}
    print(f"{'launcher':16} {'wall s (median)':>16} {'steps/s (median)':>17}   ({args.runs} interleaved runs each, "
          f"{args.nproc} ranks)")
    for k, (w, s) in med.items():
        print(f"{k:16} {w:16.2f} {s:17.1f}   runs: " + ", ".join(f"{a:.1f}s/{b:.0f}" for a, b in res[k]))
    wall = med["trainwreck run"][0] / med["torchrun"][0] - 1
    rate = 1 - med["trainwreck run"][1] / med["torchrun"][1]
    print(f"overhead: {wall:+.1%} wall time (goal ≤ +10%), {rate:+.1%} fewer steps/s (goal ≤ 5%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
