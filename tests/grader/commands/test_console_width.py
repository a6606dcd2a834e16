"""The console fits a terminal (issue 26 item 7), rendered with a recording rich Console of 80 and
120 columns: `list` is one line per exercise and a progress count, `grade` (and a practice grading)
one line per check with its verdict and deciding figure, `--verbose` each check's whole evidence;
no line is wider than the terminal."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from grader import console
from grader.exercises import discover
from grader.practice import console as console_practice
from grader.result import GradeResult
from tests.grader.commands.practice_fakes import fake_grading
from tests.grader.sessions.fakes import result

# messages as real gradings write them (the longest kinds: asides, several clauses)
MESSAGES = {
    "completes": (True, "all 2 ranks exited 0"),
    "memory_flat": (False, "rank 0's memory of its process tree (sampled from outside) changed +0.035 MB per step "
                           "over 65 steps after warm-up (431 → 498 MB), within each of the 3 sets of processes it "
                           "ran (DataLoader workers started or ended between them); threshold 0.3 MB per step"),
    "checkpoints_sound": (True, "36 checkpoints (files) over 3 runs load, each file written by one rank and never in "
                                "place where a restart reads; the restarts (resume, resume_save) began from the "
                                "newest complete checkpoint"),
    "collectives_per_step": (False, "216 collectives per optimizer step (median over the steps after the first; "
                                    "most common: all_reduce x13392); at most 2 allowed"),
    "world_size_equivalence": (True, "world sizes 1, 2 end at the same parameters within rtol=0.001, atol=1e-05"),
}
THROUGHPUT = ("1.01x the broken baseline's steps/s (median of 1 rounds, spread 0%); the reference reaches 3.51x; "
              "pass at 1.75x (one round, no warm-up, no compute bound (quick))")


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINWRECK_HOME", str(tmp_path / "home"))


def terminal(monkeypatch, width: int) -> Console:
    term = Console(width=width, record=True, file=io.StringIO(), highlight=False, soft_wrap=True)
    monkeypatch.setattr(console, "out", term)
    return term


def shown(term: Console, width: int) -> list[str]:
    """The lines printed; every one fits ``width``, but for a path on a line of its own (whole, to be
    copied)."""
    lines = term.export_text().splitlines()
    assert lines and all(len(line) <= width or re.fullmatch(r"  /\S+", line) for line in lines), \
        [line for line in lines if len(line) > width]
    return [line.rstrip() for line in lines]


def graded(**extra) -> GradeResult:
    data = result("memory-leak", {n: p for n, (p, _) in MESSAGES.items()}, throughput=True)
    for c in data["checks"]:
        c["message"] = THROUGHPUT if c["name"] == "throughput" else MESSAGES[c["name"]][1]
    data["checks"][-1]["passed"] = False
    for k, v in extra.items():
        data[k] = {**data[k], **v} if isinstance(v, dict) and data.get(k) else v
    return GradeResult.model_validate(data)


@pytest.mark.parametrize("width", [80, 120])
def test_list_is_one_line_per_exercise_and_a_progress_count(invoke, monkeypatch, tmp_path, width):
    found, _ = discover()
    scripts = [e for e in found if e.kind == "script"]
    deep = tmp_path / ("a-long-folder-name-" * 6) / "ws"
    assert invoke("start", "memory-leak", "--dir", str(deep)).code == 0
    fake_grading(monkeypatch, {"completes": True, "memory_flat": True})
    assert invoke("grade", cwd=deep).code == 0

    term = terminal(monkeypatch, width)
    p = invoke("list", cwd=tmp_path)  # workspaces shown relative to the current folder
    assert p.code == 0, p.err
    lines = shown(term, width)
    assert re.fullmatch(r"slug +kind +difficulty +min +status", lines[0])
    rows = lines[1:1 + len(found)]
    for e, line in zip(found, rows):
        status = "passed" if e.slug == "memory-leak" else "-"
        assert re.fullmatch(rf"{re.escape(e.slug)} +{e.kind} +{e.manifest.difficulty} +{e.manifest.minutes} "
                            rf"+{status}", line), line
    assert lines[1 + len(found)] == (f"1 of {len(scripts)} passed (the {len(found) - len(scripts)} design "
                                     "scenarios an interviewer scores)")
    assert lines[2 + len(found)] == "details of one: trainwreck show SLUG"
    # the practice workspaces: one line each, however long the path
    (head, workspace) = lines[-2:]
    assert re.fullmatch(r"exercise +progress +tries +hints +tp +solution +workspace", head)
    assert re.match(r"memory-leak +passed +1 +0/3 +- +- +…", workspace), workspace
    assert workspace.endswith("-folder-name-/ws"), workspace  # a path cut keeps its end
    assert lines[-4:-2] == ["", "practice workspaces (tp: best throughput score, 0 broken, 1 reference)"]
    assert len(lines) == 1 + len(found) + 2 + 4


@pytest.mark.parametrize("width", [80, 120])
def test_grade_is_one_line_per_check_with_its_deciding_figure(monkeypatch, width):
    res = graded()
    term = terminal(monkeypatch, width)
    console.grade_summary(res)
    lines = shown(term, width)
    assert lines[0] == "memory-leak (workspace)"
    assert re.fullmatch(r"verdict +check +deciding figure", lines[1])
    rows = lines[2:2 + len(res.checks)]
    for c, line in zip(res.checks, rows):
        verdict = "pass" if c.passed else "FAIL"
        assert re.match(rf"{verdict} +{c.name}{'' if c.required else '[*]'} +\S", line), line
    figures = dict(zip([c.name for c in res.checks], rows))
    assert figures["memory_flat"].endswith("+0.035 MB per step (threshold 0.3 MB)")
    assert figures["completes"].endswith("all 2 ranks exited 0")
    assert "216 collectives per optimizer step" in figures["collectives_per_step"]
    assert "1.01x the broken baseline's steps/s" in figures["throughput"]
    assert lines[2 + len(res.checks)] == "* credit: scored, not required to pass"
    assert "each check's whole evidence: --verbose, or the result file" in lines


@pytest.mark.parametrize("width", [80, 120])
def test_grade_verbose_shows_each_checks_whole_evidence(monkeypatch, width):
    res = graded()
    term = terminal(monkeypatch, width)
    console.grade_summary(res, verbose=True)
    lines = shown(term, width)
    flat = " ".join(" ".join(lines).split())
    for c in res.checks:
        assert " ".join(c.message.split()) in flat, c.name
    assert any(re.fullmatch(r"FAIL +memory_flat", line) for line in lines)


@pytest.mark.parametrize("width", [80, 120])
def test_a_practice_grading_is_one_line_per_check(invoke, monkeypatch, tmp_path, width):
    ws = tmp_path / "ws"
    assert invoke("start", "memory-leak", "--dir", str(ws)).code == 0
    fake_grading(monkeypatch, {"completes": True, "memory_flat": False, "workload_intact": True})
    term = terminal(monkeypatch, width)
    assert invoke("grade", cwd=ws).code == 1
    lines = shown(term, width)
    assert lines[0] == "memory-leak attempt 1"
    assert [re.split(r" +", line, maxsplit=2)[:2] for line in lines[2:5]] == [
        ["pass", "completes"], ["FAIL", "memory_flat"], ["pass", "workload_intact"]]
    assert lines[5].startswith("NOT YET")
    term = terminal(monkeypatch, width)
    assert invoke("grade", "--verbose", cwd=ws).code == 1
    lines = shown(term, width)
    assert [line for line in lines[1:7] if not line.startswith(" ")] == ["pass     completes", "FAIL     memory_flat",
                                                                           "pass     workload_intact"]
    assert lines[4].strip() == "memory_flat broke: rank 1 consumed indices 0-63 twice"


def test_the_headline_keeps_a_first_clause_that_fits_and_drops_asides_that_do_not():
    assert console.headline("x", "all 2 ranks exited 0") == "all 2 ranks exited 0"
    assert console.headline("x", "a (b) c; d", room=80) == "a (b) c"
    assert console.headline("x", "a (b (c)) d; e", room=3) == "a d"
    assert console.headline("memory_flat", MESSAGES["memory_flat"][1], room=40) == \
        "+0.035 MB per step (threshold 0.3 MB)"
    # a ';' inside an aside does not end the clause; the figure after a colon where the clause is long
    assert console.headline("x", "followed the path at every step (128 steps; largest 5.8e-09)", room=30) == \
        "followed the path at every step"
    assert console.headline("x", "final parameters match the reference run's: largest difference 3.92e-05 "
                                 "(0.01% of its norm) in net.0.weight; tolerance rtol=0", room=50) == \
        "largest difference 3.92e-05 in net.0.weight"


def test_exercise_lines_count_only_scripts(monkeypatch):
    term = terminal(monkeypatch, 80)
    row = {"kind": "script", "difficulty": "easy", "minutes": 45}
    console_practice.exercise_lines([{**row, "slug": "a", "progress": {"passed": True, "attempts": 2}},
                                     {**row, "slug": "b", "progress": {"passed": False, "attempts": 2}},
                                     {**row, "slug": "c", "progress": {"passed": False, "attempts": 0}},
                                     {**row, "slug": "d", "kind": "scenario", "progress": None}])
    lines = shown(term, 80)
    assert [line.split("  ")[-1].strip() for line in lines[1:5]] == ["passed", "attempted (2 tries)", "started", "-"]
    assert lines[5] == "1 of 3 passed (the 1 design scenario an interviewer scores)"


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("verbose", [False, True])
def test_grade_issues_flags_throughput_and_isolation_fit_too(monkeypatch, width, verbose):
    long = "the loss jumps after every restart and the learning rate is back in warm-up, " * 2
    res = graded(**{
        "issues": [{"name": "leak", "title": long, "weight": 1.0, "fixed": False, "checks": ["memory_flat"],
                    "failed": ["memory_flat"]},
                   {"name": "order", "title": "t", "weight": 1.0, "fixed": True, "checks": ["completes"],
                    "failed": []}],
        "flags": [{"kind": "source", "what": "reads the reference's checkpoint folder " * 4, "where": "train.py:12"},
                  {"kind": "stray", "what": "a process left running", "run": "main"}],
        "throughput": {"fraction_of_bound": 0.5, "reference_fraction_of_bound": 0.9},
        "isolation": {"kind": "none", "reason": "bubblewrap cannot make a user namespace here " * 2},
    })
    term = terminal(monkeypatch, width)
    console.grade_summary(res, verbose=verbose)
    lines = shown(term, width)
    flat = " ".join(" ".join(lines).split())
    if verbose:
        assert " ".join(long.split()) in flat and ("reads the reference's checkpoint folder " * 4).strip() in flat
    else:
        at = lines.index("issues (each scored on its own):")
        assert re.fullmatch(r"issue +verdict +failing checks +symptom", lines[at + 1])
        assert re.match(r"leak +NOT FIXED +memory_flat +the loss jumps", lines[at + 2])
        assert re.fullmatch(r"order +fixed +- +t", lines[at + 3]) and lines[at + 4] == "1 of 2 issues fixed"
        at = lines.index("flags for a human (2; they do not change the verdict):")
        assert re.match(r"source +train.py:12 +reads the reference's", lines[at + 2])
        assert re.fullmatch(r"stray +main run +a process left running", lines[at + 3])
    assert "(median of per-round ratios; reported, not graded)" in flat
    assert "isolation: NONE, the candidate's code ran unisolated" in flat


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("slug", [e.slug for e in discover()[0]])
def test_show_wraps_the_brief_at_the_width_and_keeps_every_word(invoke, monkeypatch, slug, width):
    from grader.exercises import find

    term = terminal(monkeypatch, width)
    assert invoke("show", slug).code == 0
    lines = term.export_text().splitlines()
    fence, too_wide = False, []
    for line in lines:
        if line.lstrip().startswith("```"):
            fence = not fence
        elif not fence and len(line) > width and " " in line.strip():  # a single long word stays whole
            too_wide.append(line)
    assert not too_wide
    ex = find(slug)
    briefs = [ex.dir / n for n in ("BRIEF.md", "CONSTRAINTS.md")] if ex.kind == "scenario" else [ex.brief]
    words = [w for b in briefs if b.exists() for w in b.read_text().split() if w != ">"]
    shown_words = [w for w in " ".join(lines).split() if w != ">"]
    n = len(words)
    assert any(shown_words[i:i + n] == words for i in range(len(shown_words) - n + 1))
