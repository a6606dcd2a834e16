"""Re-judge stored gradings with the current checks and report every verdict that changed: the
proof that a refactor of the grader changed no behaviour (or exactly the behaviour it meant to).

    python benchmarks/regrade_compare.py .trainwreck/verify/20261123-180000   # any folder of result.json files

Exit 0 when every check's verdict, every issue's verdict, the pass and the score are unchanged.
"""

from __future__ import annotations

import sys
from pathlib import Path

from grader.exercises import find
from grader.grade import regrade
from grader.result import GradeResult


def compare(path: Path) -> list[str]:
    old = GradeResult.read(path)
    new = regrade(old, find(old.exercise))
    diffs = []
    before = {c.name: c.passed for c in old.checks}
    after = {c.name: c.passed for c in new.checks}
    for name in sorted(set(before) | set(after)):
        if before.get(name) != after.get(name):
            diffs.append(f"{name}: {before.get(name)} -> {after.get(name)}")
    for a, b in zip(old.issues, new.issues, strict=False):
        if a.fixed != b.fixed:
            diffs.append(f"issue {a.name}: fixed {a.fixed} -> {b.fixed}")
    if (old.passed, round(old.score, 4)) != (new.passed, round(new.score, 4)):
        diffs.append(f"passed/score: {old.passed}/{old.score} -> {new.passed}/{new.score}")
    return diffs


def main(argv: list[str]) -> int:
    paths = sorted(p for root in argv for p in Path(root).rglob("result.json"))
    if not paths:
        print("no result.json under " + " ".join(argv), file=sys.stderr)
        return 2
    changed = 0
    for p in paths:
        diffs = compare(p)
        changed += bool(diffs)
        print(f"{'CHANGED' if diffs else 'same   '} {p}" + "".join(f"\n    {d}" for d in diffs))
    print(f"{len(paths)} gradings re-judged, {changed} with a changed verdict")
    return 1 if changed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
