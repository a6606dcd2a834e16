"""Printing for practice: `start`, a grading as practice shows it, `hint`, `solution`, `reset`,
`watch`'s events and `list`'s progress (results on stdout, progress and notes on stderr, through
``grader.console``). Cells and texts are data, never rich markup."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from rich.markup import escape

from grader import console
from harness.paths import display_path


def started(ws, ex, files, brief: str) -> None:
    console.text(brief.rstrip())
    console.text("")
    if ws.scenario:
        console.text(f"practice workspace for {ex.slug}: {ws.root}")
        console.text(f"hand in: {ex.manifest.deliverable}")
        console.text("a design scenario: nothing grades it automatically; an interviewer scores it against "
                     f"rubrics/{ex.manifest.rubric}.toml. `trainwreck solution --reveal` shows the reference notes.")
        return
    names = list(ex.manifest.editable)
    console.text(f"practice workspace for {ex.slug}: {ws.root}")
    console.text(f"fix: {', '.join(names)}; the rest is read-only evidence (logs/, baseline.json); "
                 "write what you find in DIAGNOSIS.md")
    console.text(f"next: cd {ws.root} && trainwreck watch   (grades on every save; or `trainwreck run` to launch it, "
                 "`trainwreck grade` once, `trainwreck hint` when stuck)")


def result(view: dict[str, Any], verbose: bool = False) -> None:
    """A grading as practice shows it: one line per check, its verdict and the deciding figure of
    what it observed (with ``verbose``, all it observed)."""
    n = view.get("attempt")
    console.text(f"{view['exercise']}{f' attempt {n}' if n else ''}", style="bold")
    console.check_lines(view["checks"], verbose)
    if view.get("issues"):
        console.text("issues (each scored on its own):")
        console.lines(["issue", "verdict", "symptom"],
                      [[i["name"], "fixed" if i["fixed"] else "NOT FIXED", i["title"]] for i in view["issues"]])
    tp = view.get("throughput")
    if tp is not None:
        console.prose(f"throughput score {tp['normalized']:.2f} (0 = the broken script, 1 = the reference)"
                     + ("" if tp["counted"] else "; not counted while a required check fails"))
    if view.get("unisolated"):
        console.prose(f"isolation: NONE, your code ran unisolated ({view['unisolated']})", style="bold yellow")
    if view["environment_failure"]:
        console.out.print("[bold yellow]ENVIRONMENT FAILURE[/] (the machine or the kit broke, not your fix: "
                          "grade again)", markup=True)
    elif view["passed"]:
        console.out.print(f"[bold green]PASSED[/]  score {view['score']:.2f}", markup=True)
        console.prose("`trainwreck solution` shows the reference fix next to yours")
    else:
        console.out.print(f"[bold red]NOT YET[/]  score {view['score']:.2f}"
                          + ("  (it passed in an earlier attempt)" if view.get("passed_before") else ""), markup=True)
        h = view.get("hints") or {}
        seen, total = h.get("seen", 0), h.get("total", 0)
        if seen < total:
            console.text(f"stuck? `trainwreck hint` ({seen} of {total} hints seen)")
        else:
            console.prose(f"all {total} hints seen (`trainwreck hint --all`); `trainwreck solution --reveal` shows the "
                         "reference fix (recorded as revealed)")
    if view.get("run_dir"):
        console.text("this run's per-rank logs:")
        console.text(f"  {view['run_dir']}")  # a path on a line of its own: whole, to be copied


def hints(h, listing: bool) -> None:
    if not h.shown:
        console.text(f"no hint seen yet ({h.total} in all): `trainwreck hint` shows the first")
        return
    if listing:
        for i, text in enumerate(h.shown, 1):
            console.prose(f"hint {i} of {h.total}: {text}")
    elif h.new:
        console.prose(f"hint {len(h.shown)} of {h.total}: {h.shown[-1]}")
    else:
        console.text(f"no more hints: all {h.total} seen (`trainwreck hint --all` lists them); "
                     "`trainwreck solution --reveal` shows the reference fix (recorded as revealed)")


def solution(sol, with_notes: bool, scenario: bool) -> None:
    if sol.diff:
        console.out.print(sol.diff, markup=False, highlight=False, end="")
    elif not scenario:
        console.info("your files are the reference's, byte for byte")
    if with_notes and sol.notes:
        console.text(sol.notes.rstrip())
    if sol.revealed:
        console.info("recorded as revealed in this workspace's progress")


def reset(r) -> None:
    if not r.restored:
        console.text("nothing to reset: every file is as shipped")
        return
    console.text(f"restored as shipped: {', '.join(r.restored)}")
    if r.backup is not None:
        console.text(f"your files before the reset: {r.backup}")


def watch_event(ev: dict[str, Any], clear: bool, keys: bool = False, verbose: bool = False) -> None:
    kind = ev["event"]
    again = ("watching: save to grade again; keys: h hint, l list, g grade now, q quit" if keys
             else "watching: save to grade again, Ctrl-C to stop")
    if kind == "watching":
        console.info(f"watching {', '.join(ev['files'])}: every save grades it again"
                     + ("" if keys else " (Ctrl-C to stop)"))
        if keys:
            console.info("keys: h hint, l list, g grade now, q quit")
    elif kind == "grading":
        if clear:
            console.out.clear()
        why = f"{', '.join(ev['files'])} saved" if ev["reason"] == "saved" else "as it is now"
        console.out.print(f"[bold]grading {ev['n']}[/] ({escape(why)}, {datetime.now():%H:%M:%S})", markup=True)
    elif kind == "progress":
        console.info(f"  {ev['line']}")
    elif kind == "cancelled":
        why = {"saved": f"{', '.join(ev['files'])} saved again", "interrupted": "Ctrl-C",
               "quit": "q"}.get(ev["reason"], "stopping")
        console.info(f"cancelled grading {ev['n']} ({why}): stopped in {ev['seconds']:.1f} s, nothing left running")
    elif kind == "result":
        result(ev["view"], verbose)
        console.info(again)
    elif kind == "unchanged":
        console.text("unchanged since the last grading:")
        result(ev["view"], verbose)
        console.info(again)
    elif kind == "busy":
        console.info(f"grading {ev['n']} is running: its result shows when it ends (a save grades again)")
    elif kind == "error":
        console.error(f"grading {ev['n']} did not run: {ev['message']}")
        console.info(again)
    elif kind == "missing":
        console.warn(f"{', '.join(ev['files'])} missing: waiting for it to be saved (`trainwreck reset` restores it)")
    elif kind == "stopped":
        console.info(f"stopped watching after {ev['finished']} grading{'s' if ev['finished'] != 1 else ''}; "
                     "progress is kept in the workspace")


def passed_line(passed: int, total: int) -> None:
    """rustlings' progress: how many of the script exercises have passed in a practice workspace."""
    console.text(f"{passed} of {total} passed")


def _tp(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def _status(p: dict[str, Any] | None) -> str:
    if p is None:
        return "-"
    if p["passed"]:
        return "passed"
    return f"attempted ({p['attempts']} tr{'y' if p['attempts'] == 1 else 'ies'})" if p["attempts"] else "started"


def exercise_lines(rows: list[dict[str, Any]]) -> None:
    """`trainwreck list`: one line per exercise (its details: `trainwreck show SLUG`), then how many
    of the scripts have passed in a practice workspace, as rustlings counts them."""
    console.lines(["slug", "kind", "difficulty", "min", "status"],
                  [[r["slug"], r["kind"], r["difficulty"], r["minutes"], _status(r["progress"])] for r in rows],
                  right=(3,))
    scripts = [r for r in rows if r["kind"] == "script"]
    passed = sum(bool(r["progress"] and r["progress"]["passed"]) for r in scripts)
    designs = len(rows) - len(scripts)
    console.text(f"{passed} of {len(scripts)} passed"
                 + (f" (the {designs} design scenario{'s' if designs != 1 else ''} an interviewer scores)"
                    if designs else ""))
    console.text("details of one: trainwreck show SLUG")


def progress_table(rows: list[dict[str, Any]]) -> None:
    """`trainwreck list`: one line per practice workspace (tp: best throughput score, 0 the broken
    script, 1 the reference)."""
    if not rows:
        return
    table = []
    for r in rows:
        if r.get("error"):
            table.append([r["exercise"] or "?", "unreadable", "-", "-", "-", "-", r["workspace"]])
            continue
        hints = f"{r['hints_used']}/{r['hints_total']}" if r.get("hints_total") is not None else str(r["hints_used"])
        status = "passed" if r["passed"] else ("attempted" if r["attempts"] else "started")
        table.append([r["exercise"], status, r["attempts"], hints, _tp(r["best_throughput"]), r["solution"] or "-",
                      display_path(r["workspace"]) or r["workspace"]])
    console.text("")
    console.text("practice workspaces (tp: best throughput score, 0 broken, 1 reference)")
    console.lines(["exercise", "progress", "tries", "hints", "tp", "solution", "workspace"], table, right=(2, 4),
                  keep_end=True)
