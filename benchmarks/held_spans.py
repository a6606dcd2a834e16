"""How fast a graded run's step records arrive against its reference run's, per rank, over the
gradings under the folders given (``result.json`` files from ``trainwreck verify --out``, ``grade``
or the validity gradings): the margin of ``grader.checks._held.SPAN_RATIO``. The ratio is the
reference's time between step-record arrivals over the run's, per step: an honest fix near 1, the broken script of a slow
exercise below it; a rank that held every record back and sent them in one burst far above it.

    python benchmarks/held_spans.py /tmp/vrun [...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from grader.checks._held import arrivals
from grader.evidence import load_run
from grader.evidence.memory import REPORTED, rank_series


def main(roots: list[str]) -> None:
    ratios: list[tuple[float, str]] = []
    refs: dict[str, object] = {}
    for root in roots:
        for res in sorted(Path(root).rglob("result.json")):
            try:
                dirs = json.loads(res.read_text()).get("run_dirs") or {}
            except ValueError:
                continue
            if "reference" not in dirs or "main" not in dirs or not Path(dirs["main"]).is_dir():
                continue
            try:
                ev = load_run("main", Path(dirs["main"]))
                ref = refs.get(dirs["reference"]) or refs.setdefault(dirs["reference"],
                                                                     load_run("reference", Path(dirs["reference"])))
            except (OSError, ValueError, KeyError):
                continue
            if not ev.sandboxed:
                continue
            for r in sorted(ev.ranks):
                mine, theirs = arrivals(ev, r), arrivals(ref, r)  # type: ignore[arg-type]
                if len(mine) < 20 or len(theirs) < 20:
                    continue
                step = (mine[-1] - mine[0]) / (len(mine) - 1) * 1000  # ms between arrivals, per step
                ref_step = (theirs[-1] - theirs[0]) / (len(theirs) - 1) * 1000
                fell_back = rank_series(ev, r).what == REPORTED
                ratios.append((ref_step / max(step, 1e-3), f"{res.parent} rank {r}"))
                print(f"{ref_step / max(step, 1e-3):7.2f}  run {step:7.2f} ms/step  reference {ref_step:7.2f} ms/step"
                      f"{'  (no sample among its steps)' if fell_back else ''}  {res.parent} rank {r}")
    if ratios:
        top = max(ratios)
        print(f"{len(ratios)} ranks: reference / run time per step from {min(ratios)[0]:.2f} to {top[0]:.2f} ({top[1]})")


if __name__ == "__main__":
    main(sys.argv[1:])
