"""What `trainwreck run --profile` costs: the same plain DDP job (benchmarks/ddp_bench.py) through
`trainwreck run` with and without `--profile`, interleaved (plain, profiled, profiled, plain, ...).

    python benchmarks/profile_overhead.py [--runs 5] [--nproc 2]

Two rates per run: the job's own steps/s (rank 0, after its 20 warm-up steps: the phase timers'
cost in steady state, the torch profiler idle by then) and the harness's steps/s (from step 3 on,
so the 4 steps the torch profiler warms up and records, and its trace export, are in it). Per-round
ratios (each profiled run against the plain run next to it) are reported with their median and
range, and the machine's load average before and after: on a shared machine only the ratios mean much.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "ddp_bench.py"
RATE = re.compile(r"steps_per_s=([0-9.]+)")


def run(nproc: int, tmp: Path, profile: bool) -> dict:
    run_dir = Path(tempfile.mkdtemp(dir=tmp)) / "run"
    cmd = [sys.executable, "-m", "grader.cli", "run", str(SCRIPT), "--nproc", str(nproc), "--json",
           "--run-dir", str(run_dir)] + (["--profile"] if profile else [])
    p = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=HERE.parent)
    out = json.loads(p.stdout)
    job = float(RATE.search((run_dir / "ranks" / "0" / "stdout.log").read_text()).group(1))
    return {"job": job, "harness": out["ranks"][0]["steps_per_s"], "profile": out.get("profile")}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--nproc", type=int, default=2)
    args = ap.parse_args()
    plain, profiled = [], []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        run(args.nproc, Path(tmp), False)  # warm-up: page cache, compiled bytecode
        for i in range(args.runs):
            order = [(plain, False), (profiled, True)]
            for into, prof in order if i % 2 == 0 else order[::-1]:
                into.append(run(args.nproc, Path(tmp), prof))
            print(f"round {i + 1}/{args.runs}", file=sys.stderr, flush=True)
    load_after = os.getloadavg()
    print(f"load average before {load_before[0]:.1f}, after {load_after[0]:.1f}; {args.runs} rounds, "
          f"world size {args.nproc}")
    for field, what in (("job", "job's own steps/s (after its warm-up)"),
                        ("harness", "harness steps/s (traced steps included)")):
        a = [r[field] for r in plain]
        b = [r[field] for r in profiled]
        ratios = [y / x for x, y in zip(a, b)]
        print(f"{what}: plain median {statistics.median(a):.1f}, --profile median {statistics.median(b):.1f}; "
              f"per-round ratio median {statistics.median(ratios):.3f} "
              f"(range {min(ratios):.3f}-{max(ratios):.3f})")
    last = profiled[-1]["profile"]["ranks"][0]
    print("phases of the last profiled run, rank 0 (median ms): " + ", ".join(
        f"{p} {s['median_ms']:.2f}" for p, s in last["phases"].items()) + f"; step {last['step_ms']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
