"""The README's figures from the suite's log (one JSON line per case run):

    python -m tests.adversarial.figures [LOG.jsonl ...]     # default: the newest log in .trainwreck/adversarial
    python -m tests.adversarial.figures --cases              # the table of cases, for the README

Prints the outcome per case (the last run of each in the logs given) and the figures: cases tried,
how many scored above zero, left a process behind, changed a later verdict, reached something real
(a canary), and how many were graded with the sandbox.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.adversarial.cases import CASES


def load(paths: list[Path]) -> dict[str, dict]:
    last: dict[str, dict] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                last[rec["id"]] = rec
    return last


def expected(c) -> str:
    e = c.expect
    parts = []
    if e.check:
        parts.append(f"`{e.check}` fails naming " + " / ".join(f'"{w}"' for w in e.words) if e.words
                     else f"`{e.check}` fails")
    if e.refused:
        parts.append("or refused naming " + " / ".join(f'"{w}"' for w in e.refused) if e.check
                     else "refused naming " + " / ".join(f'"{w}"' for w in e.refused))
    if e.environment_ok:
        parts.append("or an environment failure")
    if e.not_passing:
        parts.append("; never passes: " + ", ".join(f"`{n}`" for n in e.not_passing))
    if e.flags:
        parts.append("; flags: " + ", ".join(f"`{k}`" for k in e.flags))
    return " ".join(parts) + f"; within {c.limit_s:.0f} s"


def table() -> None:
    """The README's table of cases (what each is, not how it went)."""
    print("| class | case | exercise (base) | what it tries | what stops it | expected outcome | needs the sandbox |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for c in CASES:
        print(f"| {c.klass} | `{c.id}` | {c.exercise} ({c.base}) | {c.tries} | {c.stops} | {expected(c)} | "
              f"{'yes' if c.needs_sandbox else 'no'} |")


def main(argv: list[str]) -> int:
    if argv == ["--cases"]:
        table()
        return 0
    if argv:
        paths = [Path(a) for a in argv]
    else:
        from grader.exercises import kit_root

        logs = sorted((kit_root() / ".trainwreck" / "adversarial").glob("*.jsonl"))
        if not logs:
            print("no log yet: run `make adversarial`", file=sys.stderr)
            return 2
        paths = logs[-1:]
    runs = load(paths)
    print(f"logs: {', '.join(str(p) for p in paths)}\n")
    print("| case | exercise | mode | outcome | hostile verdict | honest after | wall s | grader peak MiB |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for c in CASES:
        r = runs.get(c.id)
        if r is None:
            print(f"| `{c.id}` | {c.exercise} | - | not run | | | | |")
            continue
        h, o = r["hostile"], r["honest"]
        verdict = (f"score {h['score']}, failed {', '.join(h['failed']) or 'none'}" if h.get("outcome") == "graded"
                   else h.get("outcome"))
        honest = ("pass" if o.get("passed") else f"FAIL ({o.get('describe', '')[:60]})") if o else "-"
        outcome = "stopped" if r["stopped"] else "FOOLED/HARMED"
        print(f"| `{c.id}` | {c.exercise} | {r['mode']} | {outcome} | {verdict} | {honest} | {r['wall_s']} | "
              f"{h.get('peak_rss_mb')} |")
    tried = list(runs.values())
    sandboxed = [r for r in tried if r["mode"] == "sandboxed"]
    print()
    print(f"- hostile cases tried: {len(tried)} ({len(sandboxed)} with the sandbox, "
          f"{len(tried) - len(sandboxed)} without)")
    print(f"- stopped: {sum(r['stopped'] for r in tried)}")
    print(f"- scored above zero (hostile grading or its regrade): {sum(r['scored_above_zero'] for r in tried)}"
          f" {[r['id'] for r in tried if r['scored_above_zero']]}")
    print(f"- left a process behind: {sum(bool(r['left_behind']) for r in tried)}"
          f" {[r['id'] for r in tried if r['left_behind']]}")
    print(f"- changed a later verdict or what later gradings read: {sum(bool(r['changed_later']) for r in tried)}"
          f" {[r['id'] for r in tried if r['changed_later']]}")
    print(f"- reached something real (canaries): {sum(bool(r['canaries']) for r in tried)}"
          f" {[r['id'] for r in tried if r['canaries']]}")
    print(f"- wall time of the cases: {sum(r['wall_s'] for r in tried) / 60:.1f} min")
    for r in tried:
        if not r["stopped"]:
            print(f"\n{r['id']} ({r['mode']}):\n  " + "\n  ".join(r["problems"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
