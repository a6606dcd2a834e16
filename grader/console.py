"""The one place that prints. Results go to stdout, diagnostics (progress, warnings, errors) to
stderr, so ``--json`` output can be piped while the user still sees what is happening. Each
product lays out its own screens over it (``grader.practice.console``, ``grader.sessions.console``)."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from grader.text import printable
from harness.paths import display_path

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def error(msg: str) -> None:
    err.print(f"[bold red]error:[/] {escape(msg)}", markup=True)


def warn(msg: str) -> None:
    err.print(f"[yellow]warning:[/] {escape(msg)}", markup=True)


def info(msg: str) -> None:
    err.print(msg, markup=False)


def rank_line(rank: int, stream: str, line: str) -> None:
    sys.stderr.write(f"[rank {rank}{'!' if stream == 'stderr' else ''}] {line}\n")
    sys.stderr.flush()


def emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")
    sys.stdout.flush()


def emit_json_line(obj: Any) -> None:
    """One JSON object on one line (a stream of events, as `watch --json` prints them)."""
    sys.stdout.write(json.dumps(obj, default=str) + "\n")
    sys.stdout.flush()


def text(msg: str, style: str | None = None) -> None:
    out.print(printable(msg), style=style, markup=False)


def prose(msg: str, style: str | None = None) -> None:
    """A sentence or a paragraph (a hint), word-wrapped at the terminal's width."""
    out.print(Text(printable(msg), style=style or ""), soft_wrap=False)


_LEAD = re.compile(r"(?P<quote>(?:>\s?)*)(?P<indent>\s*)(?P<marker>(?:[-*+]|\d+[.)])\s+)?")


def reflow_markdown(md: str, width: int) -> list[str]:
    """Markdown text (a brief) word-wrapped at ``width``: each paragraph, quote and list item is
    joined and wrapped again, keeping its quote marks and its item's indent; headings, fenced code,
    tables and blank lines are left as they are (a word longer than the width stays whole)."""
    import textwrap

    done: list[str] = []
    block: list[str] = []
    first = rest = ""
    fence = False

    def flush() -> None:
        if block:
            done.extend(textwrap.wrap(" ".join(block), width, initial_indent=first, subsequent_indent=rest,
                                      break_long_words=False, break_on_hyphens=False) or [first.rstrip()])
            block.clear()

    for line in md.splitlines():
        stripped = line.lstrip("> ").strip()
        if line.lstrip().startswith("```"):
            flush()
            fence = not fence
            done.append(line)
            continue
        if fence or not stripped or stripped.startswith(("#", "|")):
            flush()
            done.append(line)
            continue
        m = _LEAD.match(line)
        assert m is not None  # every group of _LEAD is optional: it matches at the start of any line
        quote = m["quote"].replace(" ", "")
        quote = " ".join(quote) + " " if quote else ""
        if m["marker"] or not block or (quote and not rest.startswith(quote)) or (not quote and rest.startswith(">")):
            flush()
            first = quote + m["indent"] + (m["marker"] or "")
            rest = quote + m["indent"] + " " * len(m["marker"] or "")
        block.append(line[m.end():].strip())
    flush()
    return done


def table(title: str | None, columns: list[str], rows: list[list[Any]]) -> None:
    t = Table(title=Text(title) if title else None, title_justify="left", show_lines=False)
    for i, c in enumerate(columns):
        t.add_column(c, no_wrap=i == 0)  # the key column (slug, check, rank) stays whole
    for r in rows:
        t.add_row(*(Text("" if v is None else printable(str(v))) for v in r))  # cells are data, never markup
    out.print(t)


def lines(columns: list[str], rows: list[list[Any]], right: tuple[int, ...] = (), keep_end: bool = False) -> None:
    """A table of one line per row that fits the terminal: no borders, no cell ever wraps; the
    last column takes what room is left and ends in an ellipsis where its text does not fit (the
    details are elsewhere: ``show``, ``--verbose``, result.json), or with ``keep_end`` (a path)
    begins with one and keeps the text's end."""
    cells = [[_cell(v) for v in r] for r in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    gap = 2
    widths[-1] = max(1, min(widths[-1], out.width - sum(widths[:-1]) - gap * (len(columns) - 1)))
    if keep_end:
        for r in cells:
            if len(r[-1]) > widths[-1]:
                r[-1] = "…" + r[-1][len(r[-1]) - widths[-1] + 1:]
    t = Table(box=None, show_header=True, header_style="bold", pad_edge=False, padding=(0, gap, 0, 0),
              collapse_padding=True)
    for i, c in enumerate(columns):
        t.add_column(c, no_wrap=True, overflow="ellipsis", justify="right" if i in right else "left",
                     width=widths[i])
    for r in cells:
        t.add_row(*map(Text, r))
    out.print(t, soft_wrap=False)


def _cell(v: Any) -> str:
    return "" if v is None else " ".join(printable(str(v)).split())


_PAREN = re.compile(r"\s*\([^()]*\)")
# where a check's first clause buries its figure, the phrase that holds it (the message stays whole
# under --verbose and in result.json)
_FIGURES = {"memory_flat": re.compile(r"changed (?P<fig>[+-]?[\d.]+ MB per step).*threshold (?P<bar>[\d.]+ MB)")}


def _first_clause(message: str) -> str:
    """The message up to its first ';' outside parentheses."""
    depth = 0
    for i, ch in enumerate(message):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == ";" and depth <= 0:
            return message[:i]
    return message


def _no_asides(s: str) -> str:
    while True:  # nested asides: innermost first
        shorter = _PAREN.sub("", s)
        if shorter == s:
            return " ".join(s.split())
        s = shorter


def headline(name: str, message: str, room: int = 10**6) -> str:
    """A check's deciding figure in ``room`` characters where it can: its message's first clause;
    where that is longer, the phrase that holds the figure for a check whose first clause buries it,
    or the clause without its asides in parentheses (``1.01x the broken baseline's steps/s``), or
    what follows its colon (``final parameters match ...: largest difference 3.9e-05 in w``). The
    whole message is the evidence (--verbose, result.json)."""
    first = " ".join(_first_clause(message).split())
    if len(first) <= room:
        return first or " ".join(message.split())
    m = _FIGURES.get(name)
    hit = m.search(message) if m else None
    if hit:
        return f"{hit['fig']} (threshold {hit['bar']})"
    short = _no_asides(first)
    if len(short) > room and ": " in short:
        after = short.split(": ", 1)[1]
        return after if len(after) <= room else short
    return short


def _verdict(c: dict[str, Any]) -> str:
    return "pass" if c["passed"] else ("ENV" if c["environment"] else "FAIL")


def check_lines(checks: list[Any], verbose: bool = False) -> None:
    """One line per check: its verdict, its name (``*``: credit, not required to pass) and the
    deciding figure; with ``verbose`` each line is followed by the check's whole message."""
    from rich.padding import Padding

    cs = [c if isinstance(c, dict) else {"name": c.name, "passed": c.passed, "environment": c.environment,
                                         "required": c.required, "message": c.message} for c in checks]
    if not verbose:
        names = [c["name"] + ("" if c["required"] else "*") for c in cs]
        room = out.width - len("verdict  ") - max([len("check"), *map(len, names)]) - 2
        lines(["verdict", "check", "deciding figure"],
              [[_verdict(c), n, headline(c["name"], c["message"], room)] for c, n in zip(cs, names)])
    else:
        for c in cs:
            out.print(Text(f"{_verdict(c):7}  {c['name']}{'' if c['required'] else '*'}"), soft_wrap=False)
            out.print(Padding(Text(printable(c["message"])), (0, 0, 0, 9)), soft_wrap=False)
    if any(not c["required"] for c in cs):
        text("* credit: scored, not required to pass")


STALL_LINE_WAIT_S = 3.0  # how long a stall notice waits for the outside ranks' stack dumps


def _progress_table(snap) -> Table:
    t = Table(title=f"{snap.elapsed_s:5.1f} s  attempt {snap.attempt}  {snap.phase}  "
                    f"(last progress {snap.since_progress_s:.1f} s ago)", title_justify="left")
    for c in ("rank", "step", "steps/s", "RSS MB", "state"):
        t.add_column(c, justify="right" if c != "state" else "left")
    stalled = {v.rank: v for v in snap.stall.ranks} if snap.stall else {}
    for r in snap.ranks:
        state = f"exited ({r.exit_status})" if r.exited else "running"
        if r.rank in stalled and not r.exited:
            v = stalled[r.rank]
            state = (f"in {v.collective.get('op')}" if v.state == "waiting in a collective" and v.collective
                     else f"outside: {v.doing or 'unknown'}")
        t.add_row(str(r.rank), str(r.steps), f"{r.steps_per_s:.1f}", f"{r.rss_mb:.0f}", state)
    return t


def stall_notices(inner):
    """A progress callback that also says, on stderr, when a stall has lasted the hang timeout
    (what kind, who waits for whom, who is outside doing what), when what it is changes, and when
    the job goes on again; ``inner`` (the live table, or None) gets every snapshot too."""
    from harness.stall import DEADLOCK, OUTSIDE, summary

    shown: dict = {"key": None, "since": 0.0, "first": None}

    def on_progress(snap) -> None:
        if inner is not None:
            inner(snap)
        stall = snap.stall
        if stall is None:
            if shown["key"] is not None:
                info(f"stall over: the job made progress again after {shown['since']:.1f} s without any")
            shown.update(key=None, first=None)
            return
        shown["since"] = snap.since_progress_s
        if stall.key == shown["key"]:
            return
        # an outside rank's line comes with its stack dump, a look or two later: wait for it a little
        shown["first"] = shown["first"] or snap.since_progress_s
        if any(v.state == OUTSIDE and not v.site for v in stall.ranks) \
                and snap.since_progress_s - shown["first"] < STALL_LINE_WAIT_S:
            return
        shown.update(key=stall.key, first=None)
        lines = summary(stall)
        tail = "" if stall.kind == DEADLOCK else (
            f"; not a hang: the job goes on, ended only after {snap.stall_limit_s:.0f} s without progress "
            "(--stall-timeout)")
        info(printable(f"{lines[0]} (no progress for {snap.since_progress_s:.1f} s){tail}"))
        for line in lines[1:]:
            info(f"  {printable(line)}")

    return on_progress


@contextmanager
def live_progress(enabled: bool) -> Iterator[Any]:
    """A callback for ``harness.launch``'s progress snapshots: a live per-rank table on a
    terminal, nothing otherwise (CI logs should not fill with redraws)."""
    if not enabled or not err.is_terminal:
        yield None
        return
    with Live(console=err, refresh_per_second=4, transient=True) as live:
        yield lambda snap: live.update(_progress_table(snap))


def run_summary(res) -> None:
    colour = {"ok": "green", "failed": "red", "hung": "red", "timeout": "red", "limit": "red"}.get(res.status, "yellow")

    def short(site: str) -> str:  # under the cwd: relative (as run.json has it); else the file's name
        return display_path(site, keep=1) or site

    def where(r) -> str:
        site, kind, op = r.get("last_location"), r.get("location_kind"), r.get("location_op")
        if not site:
            return "-"
        return {"raised": f"raised at {short(site)}",
                "blocked": f"blocked at {short(site)}" + (f" in {op}" if op else ""),
                "pending collective": f"in {op} at {short(site)}",
                "failed collective": f"{op} failed at {short(site)}",
                "last collective": f"last {op} at {short(site)}"}.get(kind, short(site))

    def num(v, fmt: str) -> str:
        return "no data" if v is None else format(v, fmt)

    t = Table(show_lines=False)
    for c in ("rank", "exit", "steps", "steps/s", "peak RSS MB"):
        t.add_column(c, no_wrap=True)
    t.add_column("location", overflow="fold")
    for r in res.ranks:
        t.add_row(*(Text(str(v)) for v in (r["rank"], "-" if r["exit_code"] is None else r["exit_code"],
                                           r["steps"], num(r["steps_per_s"], ".1f"),
                                           num(r["peak_rss_mb"], ".0f"), where(r))))
    out.print(t)
    text("location: the line a rank raised at, or is blocked on (hung), or the call site of the collective "
         "it was in, or of its last one (a collective issued by DDP or FSDP shows the script's line that "
         "ran it, e.g. loss.backward())")
    gpus = getattr(res, "gpus", 0)
    shared = f" ({res.world_size} ranks share {gpus} GPU{'s' if gpus > 1 else ''})" \
        if res.device == "cuda" and 0 < gpus < res.world_size else ""
    out.print(f"status: [bold {colour}]{res.status}[/]  world size {res.world_size}  device {res.device}{shared}  "
              f"wall {res.wall_s:.1f} s", markup=True)
    out.print(f"run dir: {res.run_dir}", markup=False)
    if getattr(res, "cwd", None):
        out.print(f"script ran in: {res.cwd}", markup=False)
    box = getattr(res, "sandbox", None)
    if box:
        text(f"sandbox: {box.get('mode')} mode, uid {box.get('uid') if box.get('uid') is not None else 'yours'}; "
             f"peak RSS per rank (outside) "
             + (", ".join(f"{r}: {v['tree_rss_mb']:.0f} MB" for r, v in sorted(box.get("peak", {}).items())) or "none")
             + "".join(f"; {len(box[k])} {what}" for k, what in (("strays", "stray process(es) ended"),
                                                                  ("removed", "trap(s) removed from the work dir"),
                                                                  ("tampering", "sign(s) of tampering in sandbox.json"))
                       if box.get(k)))
    if getattr(res, "limit", None):
        text(f"limit: {res.limit['message']}; the run was ended")
    pg = getattr(res, "pg_timeout", None)
    if pg:
        on = pg["applied_on_ranks"]
        text(f"process-group timeout: {pg['s']:g} s, set by the harness (--pg-timeout) where the script "
             f"gave none" + (f": ranks {', '.join(map(str, on))}" if on else ": no rank (every script set its own)"))
    came_back = [ep for ep in getattr(res, "stalls", None) or [] if ep.get("ended_by") == "progress"]
    if came_back:
        text(f"stalls the job came back from ({len(came_back)}; each lasted the hang timeout or longer, "
             "and no collective was stuck):")
        for ep in came_back:
            lines = ep.get("summary") or [ep.get("kind", "stall")]
            kind, _, rest = lines[0].partition(": ")
            text(f"  {kind} for {ep['lasted_s']:.1f} s: {rest}")
            for line in lines[1:]:
                text(f"    {line}")
    for line in sample_lines(getattr(res, "samples", None) or [], stepped=any(r["steps"] for r in res.ranks)):
        text(line)
    if res.hang:
        from harness.watchdog import format_hang
        text(format_hang(res.hang).rstrip())
    if res.failure:
        who = f"rank {res.failure['rank']}" if res.failure.get("rank") is not None else "the launcher"
        text(f"{who} failed ({res.failure.get('reason')}); its error:")
        text(res.failure.get("error") or "(no output)")


def sample_lines(samples: list[dict], stepped: bool = False) -> list[str]:
    """The run's sample accounting (``harness.fetches.summarise``): what each rank's DataLoaders
    fetched of each dataset, as one line per dataset; for a job that trained without a DataLoader,
    that its samples went unseen."""
    if not samples:
        return ["samples: no DataLoader fetched anything; batches a script makes itself",
                "  (a memmap its own get_batch slices, a tensor it indexes) are not observed"] if stepped else []
    out = ["samples fetched by the DataLoaders (latest attempt of each rank):"]
    for d in samples:
        per = ", ".join(f"rank {r} {v['items']}" for r, v in d["ranks"].items())
        if d["kind"] == "iterable":
            out += [f"  {d['dataset']}: {per} items", "    which items: not observable for an iterable dataset"]
            continue
        from harness.fetches import size_of

        n = size_of(d["dataset"])
        of = f" of {n}" if n is not None else ""
        out += [f"  {d['dataset']}: {per}",
                f"    {d['distinct']} distinct{of}; {d['shared']} fetched by more than one rank over the run"]
    return out


def grade_result(res, as_json: bool = False, verbose: bool = False) -> None:
    """A ``GradeResult``: its JSON form on stdout with ``--json``, else the summary (each check's
    whole evidence with ``verbose``)."""
    if as_json:
        emit_json(res.to_json())
    else:
        grade_summary(res, verbose)


def grade_summary(res, verbose: bool = False) -> None:
    text(f"{res.exercise} ({res.submission.kind})", style="bold")
    check_lines(res.checks, verbose)
    issues_summary(res.issues, verbose)
    tp = res.throughput
    if tp:
        prose(f"throughput: {tp['speedup']:.2f}x broken (spread {tp['spread']:.0%}), reference "
              f"{tp['reference_speedup']:.2f}x, normalised {tp['normalized']:.2f}"
              + ("  [flagged for review]" if tp.get("suspicious") else ""))
        if tp.get("fraction_of_bound") is not None:
            prose(f"compute bound: submission at {tp['fraction_of_bound']:.0%} of its steps/s, reference at "
                  f"{tp['reference_fraction_of_bound']:.0%} (median of per-round ratios; reported, not graded)")
    flags_summary(res.flags, verbose)
    iso = getattr(res, "isolation", None)
    if iso is not None:
        out.print(Text(printable(iso.line()), style="" if iso.sandboxed else "bold yellow"), soft_wrap=False)
    if res.environment_failure:
        verdict, colour = "ENVIRONMENT FAILURE (not the submission's fault)", "yellow"
    else:
        verdict, colour = ("PASSED", "green") if res.passed else ("FAILED", "red")
    out.print(f"[bold {colour}]{verdict}[/]  score {res.score:.2f}  "
              f"({res.timings.get('total', 0):.0f} s)"
              + ("" if iso is None or iso.sandboxed else "  [bold yellow]UNISOLATED[/]"), markup=True)
    text("result:")
    text(f"  {res.result_path}")  # a path on a line of its own: whole, to be copied, however long
    if not verbose:
        text("each check's whole evidence: --verbose, or the result file")


def flags_summary(flags, verbose: bool = False) -> None:
    """What the submission touched that a fix has no reason to: for a human to read; one line each
    (whole with ``verbose``)."""
    if not flags:
        return
    text(f"flags for a human ({len(flags)}; they do not change the verdict):")
    if verbose:
        for f in flags:
            prose(f"  {f.line()}")
    else:
        lines(["kind", "where", "what"], [[f.kind, f.where or (f"{f.run} run" if f.run else "-"), f.what]
                                          for f in flags])


def issues_summary(issues, verbose: bool = False) -> None:
    """Per-issue verdicts of an exercise with several planted issues (partial credit), one line
    each (the symptom whole with ``verbose``)."""
    if not issues:
        return
    text("issues (each scored on its own):")
    rows = [[i.name, "fixed" if i.fixed else "NOT FIXED", ", ".join(i.failed) or "-", i.title] for i in issues]
    if verbose:
        for r in rows:
            prose(f"  {r[0]}: {r[1]} (failing: {r[2]}); {r[3]}")
    else:
        lines(["issue", "verdict", "failing checks", "symptom"], rows)
    text(f"{sum(i.fixed for i in issues)} of {len(issues)} issues fixed")


def verify_line(v) -> None:
    """One exercise's self-check (a ``grader.verify.Verification``)."""
    j = v.to_json()
    colour = "green" if v.ok else "red"
    out.print(f"[bold {colour}]{'ok' if v.ok else 'PROBLEM'}[/] {v.slug}: broken fails "
              f"{', '.join(j['broken_failed']) or 'nothing'}; solution score {j['solution_score']}", markup=True)
    if j.get("issues"):
        text(f"    issues fixed: broken {j['issues']['broken']}, solution {j['issues']['solution']}")
    for p in v.problems:
        text(f"    - {p}")


def variant_line(o) -> None:
    """One variant of the corpus graded (a ``grader.variants.Outcome``)."""
    j = o.to_json()
    colour = "green" if o.agrees else "red"
    out.print(f"[bold {colour}]{'agree' if o.agrees else 'DISAGREE'}[/] {j['variant']} ({j['class']}): expected "
              f"{j['expect']}, got {j['got']}" + (f"; failed {', '.join(j['failed'])}" if j["failed"] else "")
              + (f" ({o.wall_s:.0f} s)" if o.wall_s is not None else ""),
              markup=True)
    if o.problem:
        text(f"    - {o.problem}")


def variant_summary(per: dict) -> None:
    rows = [[slug, r["variants"], r["agree"], r["false_pass"], r["false_fail"]] for slug, r in sorted(per.items())]
    total = [sum(r[i] for r in rows) for i in range(1, 5)]
    table("variant corpus", ["exercise", "variants", "agree", "false pass", "false fail"],
          [*rows, ["all", *total]])


def validity_suite_json(suite) -> dict:
    """An exercise's generated cases (a ``grader.validity.suite.Suite``), as ``--list --json`` prints them."""
    return {"exercise": suite.slug,
            "cases": [{"case": c.name, "kind": c.kind, "expect": c.spec.expect, "must_fail": c.spec.must_fail,
                       "says": c.spec.says, "ci": c.spec.ci, "detail": c.detail} for c in suite.cases],
            "left_out": [{"case": s.name, "why": s.why} for s in suite.skipped],
            "unwritten": [{"case": m.name, "detail": m.detail, "touches": m.touches} for m in suite.unwritten],
            "short": suite.short()}


def validity_list(suite) -> None:
    """An exercise's generated cases, one line each: kind, name, expected verdict, CI's tier."""
    text(f"{suite.slug}: {len(suite.rewrites)} rewrites (and all of them composed), {len(suite.mutations)} mutations",
         style="bold")
    for c in suite.cases:
        expected = "pass" if c.spec.expect == "pass" else f"fail {', '.join(c.spec.must_fail)} saying {c.spec.says!r}"
        text(f"  {c.kind:8} {c.name:28} {expected}{' [ci]' if c.spec.ci else ''}")
    for s in suite.skipped:
        text(f"  left out {s.name}: {s.why}")
    for m in suite.unwritten:
        text(f"  to write [mutations.{m.name}]: {m.detail}; touches = {m.touches!r}", style="yellow")
    for p in suite.short():
        text(f"  - {p}", style="red")


def validity_line(o) -> None:
    """One generated case graded (a ``grader.validity.run.CaseOutcome``)."""
    j = o.to_json()
    colour = "green" if o.agrees else "red"
    failed = "; ".join(f["check"] for f in j["failed"])
    out.print(f"[bold {colour}]{'agree' if o.agrees else 'DISAGREE'}[/] {escape(o.case.id)}: expected {j['expect']}, "
              f"got {j['got']}" + (f"; failed {escape(failed)}" if failed else "")
              + (f" ({j['wall_s']:.0f} s)" if j["wall_s"] is not None else ""), markup=True)
    if o.outcome.problem:
        text(f"    - {o.outcome.problem}")


def validity_summary(per: dict, result_path) -> None:
    rows = [[slug, f"{r['accepted']} of {r['rewrites']}", f"{r['rejected']} of {r['mutations']}"]
            for slug, r in sorted(per.items())]
    table("validity suite", ["exercise", "rewrites accepted", "mutations rejected as expected"], rows)
    text(f"run result: {display_path(str(result_path))}")


def _ms(v: float) -> str:
    return f"{v:.2f}" if v < 10 else f"{v:.1f}"


def profile_table(prof: dict[str, Any]) -> None:
    """``trainwreck run --profile``: a row per phase, per rank the mean ms per optimizer step and
    the phase's share of the counted steps' wall time (the same mean, so the two agree); then where
    the traces are and what it means."""
    ranks = [r for r in prof["ranks"] if r["counted"]]
    if ranks:
        cols = ["phase"]
        for r in ranks:
            cols += [f"rank {r['rank']} ms", "share"]
        rows = [["step", *[v for r in ranks for v in (_ms(r["step_mean_ms"]), "100%")]]]
        for p in prof["phases"]:
            rows.append([p, *[v for r in ranks for v in (_ms(r["phases"][p]["mean_ms"]),
                                                         f"{r['phases'][p]['share']:.1%}")]])
        table("per-phase step breakdown: mean ms per optimizer step, and share of the counted steps' wall time",
              cols, rows)
    for r in prof["ranks"]:
        extra = [f"{r['counted']} of {r['steps']} steps counted ({r['counted_from']})"]
        tail = r["after_last_step_ms"]
        if tail.get("checkpoint"):
            where = "after the last step" if r["steps"] else "in the whole run"
            extra.append(f"checkpoint {where} {tail['checkpoint']:.1f} ms")
        if r["background_checkpoint_ms"]:
            extra.append(f"saves on other threads {r['background_checkpoint_ms']:.1f} ms in all, not in the phases")
        if r["forged_lines"]:
            extra.append(f"{r['forged_lines']} profile lines not written by the harness, ignored")
        if r["trace"]:
            first, last = r["trace_steps"] or ("?", "?")
            extra.append(f"trace of steps {first}-{last}: {r['trace']}")
        else:
            s = prof["schedule"]
            why = r["trace_error"] or (f"the trace records optimizer steps {s['wait'] + s['warmup'] + 1}-"
                                       f"{s['wait'] + s['warmup'] + s['active']}, this rank made {r['steps']}")
            extra.append(f"no trace ({why})")
        text(f"rank {r['rank']}: " + "; ".join(extra))
    if not prof["ranks"]:
        text("no profile records: no rank got as far as starting the profiler")
    for n in prof["notes"]:
        text(f"note: {n}")
