"""Wall time of grading each exercise (its reference solution and its broken script), with the
reference run cached as it is after the first grading on a machine. Goal (issue 3): at most 60 s
for a correctness exercise at world size 2.

    python benchmarks/grading.py [SLUG ...]
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from grader.exercises import discover  # noqa: E402


def grade(slug: str, kind: str, out: Path) -> tuple[float, dict]:
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "grader.cli", "grade", slug, f"--{kind}", "--json", "--out", str(out)],
                       capture_output=True, text=True, cwd=ROOT)
    return time.perf_counter() - t, json.loads(p.stdout)


def main() -> int:
    slugs = sys.argv[1:] or [e.slug for e in discover()[0]]
    print(f"{'exercise':22} {'solution s':>11} {'broken s':>9}  runs per grading")
    with tempfile.TemporaryDirectory() as tmp:
        for slug in slugs:
            grade(slug, "solution", Path(tmp) / f"{slug}-warm")  # fills the reference cache
            ws, sol = grade(slug, "solution", Path(tmp) / f"{slug}-s")
            wb, bro = grade(slug, "broken", Path(tmp) / f"{slug}-b")
            roles = ", ".join(k for k in sol["timings"] if k != "total")
            print(f"{slug:22} {ws:11.1f} {wb:9.1f}  {roles}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
