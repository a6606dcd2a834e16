"""What the sandbox costs per grading (issue 11; goal: under 2 s), and each exercise's grading time
with and without it.

    python benchmarks/grading_sandbox.py [--rounds 3] [--repeats N] [SLUG ...]   (default: memory-leak)

Per exercise: one warm-up grading each way (each isolation has its own cached reference run), then
``rounds`` pairs of ``trainwreck grade SLUG --solution``, sandboxed and ``--no-sandbox``, interleaved
ABBA so a trend in the machine's load falls on both alike. Printed per grading: wall time, the
result's per-role timings and the load average; then the median per-round difference (sandboxed
minus unisolated) of the whole grading and of its main run. Both sides seal their run dirs and scan
the source: the difference is the sandbox's (bwrap, the channel, the outside sampler and limits).
``--repeats`` passes ``trainwreck grade --repeats``: a throughput exercise's side-by-side rounds,
each of them three more runs, every one sandboxed or none (the manifest's 3 by default).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def grade(slug: str, sandboxed: bool, out: Path, repeats: int | None = None) -> tuple[float, dict]:
    cmd = [sys.executable, "-m", "grader.cli", "grade", slug, "--solution", "--json", "--out", str(out)]
    cmd += ["--repeats", str(repeats)] if repeats else []
    t = time.perf_counter()
    p = subprocess.run(cmd + ([] if sandboxed else ["--no-sandbox"]), capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"{slug} ({'sandboxed' if sandboxed else 'unisolated'}) exited {p.returncode}: "
                         f"{p.stderr.strip()[-500:]}")
    return wall, json.loads(p.stdout)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=None, help="throughput rounds per grading")
    ap.add_argument("slugs", nargs="*", default=["memory-leak"])
    args = ap.parse_args()
    print(f"cores {os.cpu_count()}, load average {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for slug in args.slugs:
            for sandboxed in (True, False):  # the reference cache of each isolation
                grade(slug, sandboxed, Path(tmp) / f"{slug}-warm-{sandboxed}", args.repeats)
            walls: dict[bool, list[float]] = {True: [], False: []}
            mains: dict[bool, list[float]] = {True: [], False: []}
            n = 0
            for i in range(args.rounds):
                for sandboxed in ((True, False) if i % 2 == 0 else (False, True)):
                    n += 1
                    wall, res = grade(slug, sandboxed, Path(tmp) / f"{slug}-{n}", args.repeats)
                    walls[sandboxed].append(wall)
                    mains[sandboxed].append(res["timings"].get("main", 0.0))
                    roles = " ".join(f"{k} {v:.1f}" for k, v in res["timings"].items())
                    print(f"  {slug} {'sandboxed ' if sandboxed else 'unisolated'} {wall:6.1f} s  ({roles})  "
                          f"load {os.getloadavg()[0]:.1f}", flush=True)
            d_wall = [a - b for a, b in zip(walls[True], walls[False])]
            d_main = [a - b for a, b in zip(mains[True], mains[False])]
            print(f"{slug}: median grading sandboxed {statistics.median(walls[True]):.1f} s, unisolated "
                  f"{statistics.median(walls[False]):.1f} s; per-round sandboxed - unisolated: grading "
                  f"{statistics.median(d_wall):+.1f} s (range {min(d_wall):+.1f} .. {max(d_wall):+.1f}), main run "
                  f"{statistics.median(d_main):+.1f} s (range {min(d_main):+.1f} .. {max(d_main):+.1f})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
