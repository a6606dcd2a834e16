"""The debrief: every section is there, candidate text is inert, nothing is fetched, it
regenerates from the database alone, and `--compare` puts candidates side by side."""

import re
import shutil

import pytest
from click.testing import CliRunner

from grader.commands.report import command as report_cmd
from grader.report import data, render
from grader.sessions import series
from grader.sessions.errors import SessionError
from harness import rundir
from tests.grader.builders import KEY, make_run
from tests.grader.sessions.fakes import scored_session


@pytest.fixture
def session(tmp_path):
    store, sid = scored_session(tmp_path / "s.db", tmp_path / "ws")
    return store, sid


def test_html_has_every_section(session):
    store, sid = session
    html = render.render(data.gather(store, sid), "html")
    for needle in ["Debrief: Ada", "Attempt timeline", "+    sampler.set_epoch(epoch)", "Checks by attempt",
                   "rank 1 consumed indices 0-63 twice", "&#34;indices&#34;", "Rubric scores",
                   "Found the cause and explained the mechanism",  # the descriptor of the level given
                   "2 levels apart", "Talk through before deciding: method", "Feedback round", "Read the ledger first",
                   "partly improved", "Interviewer notes", "Overall solid", "disjoint shard", "Own question?",
                   "written diagnosis", "set_epoch was missing"]:
        assert needle in html, needle
    assert html.count('<figure class="plot"') == 4
    assert html.count("<svg") == 3  # loss, memory, step times; this exercise has no throughput
    assert "this exercise has no throughput check" in html


def test_candidate_text_is_escaped_and_control_characters_stripped(session):
    store, sid = session
    html = render.render(data.gather(store, sid), "html")
    assert "<script>" not in html and "&lt;script&gt;alert(" in html
    assert "\x1b" not in html and "\x07" not in html and "&lt;/pre&gt;" in html
    md = render.render(data.gather(store, sid, with_pixels=False), "md")
    assert "\x1b" not in md and "\x07" not in md
    outside, fence = [], None
    for line in md.splitlines():
        m = re.match(r"\s*(`{3,})", line)
        if m and (fence is None or m.group(1) == fence):
            fence = None if fence else m.group(1)
        elif fence is None:
            outside.append(line)
    outside_fences = "\n".join(outside)
    assert "<script>" not in outside_fences  # inside a fenced block it is shown, not run
    assert "Overall solid &lt;script&gt;" in md


def test_html_is_self_contained(session):
    store, sid = session
    html = render.render(data.gather(store, sid), "html")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert not re.search(r"@import|url\(\s*['\"]?(https?:)?//", html)
    assert "<script" not in html and "<link" not in html


def test_markdown_carries_the_content_without_pixels(session):
    store, sid = session
    md = render.render(data.gather(store, sid, with_pixels=False), "md")
    for needle in ["# Debrief: Ada", "```diff", "+    sampler.set_epoch(epoch)", "| sample_partition | FAIL | pass (flipped) |",
                   "**2 levels apart**", "Read the ledger first", "partly improved", "```markdown", "disjoint shard"]:
        assert needle in md, needle
    assert "<svg" not in md


def test_plots_come_from_the_database_after_the_run_dirs_are_gone(tmp_path):
    run = make_run(tmp_path / "run", steps=30, rss=[100 + i for i in range(30)])
    ser = series.extract({"run_dirs": {"main": str(run)}})
    assert ser["main"]["ranks"]["0"]["rss_mb"][:3] == [100.0, 101.0, 102.0]
    assert ser["main"]["ranks"]["0"]["loss"] == []  # the harness recorded no loss
    # a forged line is not counted
    with open(rundir.rank_dir(run, 0) / rundir.EVENTS, "a") as f:
        f.write('{"kind": "step", "attempt": 0, "step": 99, "rss_mb": 1e6, "mac": "00"}\n')
    assert 99 not in series.extract({"run_dirs": {"main": str(run)}})["main"]["ranks"]["0"]["step"]
    shutil.rmtree(run)
    assert "error" in series.extract({"run_dirs": {"main": str(run)}})["main"]
    store, sid = scored_session(tmp_path / "s.db", tmp_path / "ws")
    store.conn.execute("UPDATE attempts SET series = ? WHERE n = 2", (__import__("json").dumps(ser),))
    html = render.render(data.gather(store, sid), "html")
    assert "no loss recorded" in html and html.count("<svg") == 2
    assert KEY  # the builders sign with the same key as the harness format expects


def test_report_and_compare_commands(session, tmp_path):
    store, sid = session
    store2, sid2 = scored_session(tmp_path / "s.db", tmp_path / "ws2", candidate="Bo")
    runner = CliRunner()
    db = str(store.path)
    r = runner.invoke(report_cmd, [sid, "--db", db, "--out", str(tmp_path / "d.html"), "--json"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "d.html").read_text().startswith("<!DOCTYPE html>")
    r = runner.invoke(report_cmd, [sid, "--db", db, "--out", str(tmp_path / "d.md")])
    assert r.exit_code == 0 and (tmp_path / "d.md").read_text().startswith("# Debrief")
    r = runner.invoke(report_cmd, ["--compare", sid, sid2, "--db", db, "--format", "md", "--out", "-"])
    assert r.exit_code == 0, r.output
    assert "| Ada" in r.output and "| Bo" in r.output and "| check: sample_partition | pass | pass |" in r.output
    r = runner.invoke(report_cmd, [sid, sid2, "--db", db])  # main() prints it as one line, exit 2
    assert isinstance(r.exception, SessionError) and "add --compare" in str(r.exception)


def test_flags_and_an_unisolated_grading_are_shown_where_the_checks_are(tmp_path):
    from tests.grader.sessions.fakes import FIXED, HOSTILE, add_attempt, result
    from tests.grader.sessions.fakes import series as fake_series

    store, sid = scored_session(tmp_path / "s.db", tmp_path / "ws")
    res = result("sampler-replay", {"completes": True, "sample_partition": True})
    res["isolation"] = {"kind": "none", "reason": "graded with --no-sandbox"}
    res["flags"] = [{"kind": "source", "what": "imports harness.instrument " + HOSTILE, "where": "train.py:3"},
                    {"kind": "stray", "what": "1 process(es) left the launcher's tree", "run": "main"}]
    add_attempt(store, sid, "sampler-replay", FIXED + "# three\n", res, fake_series())
    html = render.render(data.gather(store, sid), "html")
    assert "Flags for a human" in html and "imports harness.instrument" in html and "train.py:3" in html
    assert "Isolation: NONE" in html and "graded with --no-sandbox" in html
    assert "<script>" not in html and "\x1b" not in html
    md = render.render(data.gather(store, sid, with_pixels=False), "md")
    assert "### Flags for a human" in md and "**stray**" in md and "(in the main run)" in md
    assert "**Isolation: NONE.**" in md
