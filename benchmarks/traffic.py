"""The collective trace's claimed bytes against the bytes the run's own loopback carried, per run
dir under the folders given (sandboxed gradings from ``trainwreck verify --out`` or ``trainwreck
grade``): the margins of ``grader.evidence.traffic.MIN_RATIO`` and ``MAX_RATIO``.

    python benchmarks/traffic.py /tmp/verify-out [...]
"""

from __future__ import annotations

import sys
from pathlib import Path

from grader.evidence import load_run


def main(roots: list[str]) -> None:
    ratios = []
    for root in roots:
        for run_json in sorted(Path(root).rglob("run.json")):
            tr = load_run(run_json.parent.name, run_json.parent).traffic
            if tr is None or not tr.claimed:
                continue
            ratios.append(tr.ratio)
            print(f"{tr.ratio:6.3f}  sent {tr.sent / 2**20:8.1f} MB  claimed {tr.claimed / 2**20:8.1f} MB  "
                  f"{tr.records:6d} records  {tr.span_s:6.1f} s  {run_json.parent}")
    if ratios:
        print(f"{len(ratios)} runs: sent / claimed from {min(ratios):.3f} to {max(ratios):.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
