"""Run `trainwreck verify` several times and count, per exercise, how often the broken script failed
the checks it must fail and the reference passed every check. The bar is N of N.

    python benchmarks/repeat_verify.py --times 10 [SLUG ...]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import defaultdict


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--times", type=int, default=10)
    ap.add_argument("slugs", nargs="*")
    args = ap.parse_args()
    ok = defaultdict(int)
    problems = defaultdict(list)
    t0 = time.time()
    for i in range(args.times):
        p = subprocess.run([sys.executable, "-m", "grader.cli", "verify", "--json", *args.slugs],
                           capture_output=True, text=True)
        report = json.loads(p.stdout)
        for ex in report["exercises"]:
            ok[ex["slug"]] += ex["ok"]
            problems[ex["slug"]] += ex["problems"]
        print(f"round {i + 1}/{args.times}: " + ", ".join(f"{e['slug']} {'ok' if e['ok'] else 'PROBLEM'}"
                                                      for e in report["exercises"]), file=sys.stderr, flush=True)
    print(f"{'exercise':22} verified   (broken fails its checks and the reference passes, every round)")
    for slug in sorted(ok):
        print(f"{slug:22} {ok[slug]:>2}/{args.times}")
        for prob in sorted(set(problems[slug])):
            print(f"    {prob}")
    print(f"{args.times} rounds in {time.time() - t0:.0f} s")
    return 0 if all(v == args.times for v in ok.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
