"""A submission that makes the reference fix's edit, or another candidate's, is flagged for the
interviewer (issue 26 item 2b); the threshold keeps its margins on the variant corpus."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.exercises import find
from grader.sessions.live import session_view
from grader.sessions.similarity import MIN_EDIT, THRESHOLD, Comparer, Other, lines, matches
from grader.sessions.workspace import editable, snapshot
from grader.variants import discover, workspace
from tests.grader.sessions.fakes import add_attempt, result, scored_session

# valid fixes the corpus wrote as the reference plus one change (their `why` says so): a copy with
# a tweak, which the flag is right to raise
FROM_THE_REFERENCE = {"sampler-replay/valid-loader-workers", "slow-input-pipeline/valid-vectorised-with-workers"}
SCRIPTS = sorted({v.slug for v in discover()})


def disguised(text: str) -> str:
    """The same program re-indented, re-commented and with blank lines added: what a copy hides behind."""
    out = []
    for line in text.splitlines():
        body = line.split("  # ")[0].rstrip()
        if body.lstrip().startswith("#"):
            continue
        out.append(body.replace("    ", "  ") + ("  # my own words" if body.endswith(")") else "") + "\n\n")
    return "".join(out)


def files(ex, folder: Path) -> dict[str, str]:
    return snapshot(folder, editable(ex.manifest))


def test_tokens_leave_out_comments_docstrings_and_layout():
    a = 'def f(x):\n    """What f does."""\n    # why\n    return x + 1  # note\n\n\n'
    b = "def f(x):\n  return (x\n          + 1)\n"
    assert lines(a) == [("def", "f", "(", "x", ")", ":"), ("return", "x", "+", "1")]
    assert lines(b) == [("def", "f", "(", "x", ")", ":"), ("return", "(", "x", "+", "1", ")")]
    assert lines("x = (\n") == [("x", "=", "(")]  # a half-edited file falls back to its words


@pytest.mark.parametrize("slug", SCRIPTS)
def test_the_broken_script_is_0_the_reference_1_and_a_disguised_copy_is_flagged(slug):
    ex = find(slug)
    shipped, ref = files(ex, ex.dir), files(ex, ex.solution_dir)
    cmp = Comparer(shipped)
    assert cmp.closeness(shipped, ref) == 0.0 and cmp.closeness(ref, ref) == 1.0
    copy = {n: disguised(t) for n, t in ref.items()}
    assert copy != ref and cmp.closeness(copy, ref) >= THRESHOLD
    assert cmp.ratio(shipped, ref) > 0.7  # why whole-file similarity is not the figure: the broken script is close


def test_valid_fixes_of_the_corpus_stay_under_the_threshold(tmp_path):
    """The margin the threshold is set by: every valid fix written its own way is below it."""
    seen = {}
    for v in discover():
        if v.spec.kind != "valid":
            continue
        ex = find(v.slug)
        cmp = Comparer(files(ex, ex.dir))
        mine = files(ex, workspace(v, ex, tmp_path / v.slug / v.name))
        seen[v.id] = cmp.closeness(mine, files(ex, ex.solution_dir))
    over = {k for k, c in seen.items() if c is not None and c >= THRESHOLD}
    assert over == FROM_THE_REFERENCE, seen
    assert max(c for k, c in seen.items() if k not in over and c is not None) < THRESHOLD - 0.02


def test_an_edit_too_small_to_tell_is_not_compared():
    shipped = {"t.py": "a = f(x)\nb = g(a)\n"}
    cmp = Comparer(shipped)
    one = {"t.py": "a = f(x).item()\nb = g(a)\n"}
    assert cmp.edit(one) < MIN_EDIT and cmp.closeness(one, one) is None
    assert matches(shipped, [(1, one)], [Other("reference", "reference fix", one)]) == []


def test_matches_keep_the_closest_attempt_per_other_side():
    shipped = {"t.py": "x = load()\nfor b in x:\n    step(b)\n"}
    ref = {"t.py": "x = load()\nsampler.set_epoch(epoch)\nfor b in x:\n    step(b)\n    log(b, rank, epoch)\n"}
    own = {"t.py": "x = load(shuffle=False, seed=epoch + 1)\nfor b in x:\n    step(b)\n"}
    got = matches(shipped, [(1, own), (2, ref), (3, ref)],
                  [Other("reference", "reference fix", ref), Other("session s1", "session s1 (Bo) #4", own)])
    assert [(m.attempt, m.other, round(m.closeness, 2)) for m in got] == [
        (1, "session s1 (Bo) #4", 1.0), (3, "reference fix", 1.0)]
    assert got[1].line == "#3 makes the edit of the reference fix: closeness 1.00, 14 tokens"


def test_the_view_flags_a_copy_of_the_reference_and_of_another_session(tmp_path):
    slug = "memory-leak"
    ex = find(slug)
    shipped = (ex.dir / "train.py").read_text()
    ref = (ex.solution_dir / "train.py").read_text()
    store, first = scored_session(tmp_path / "s.db", tmp_path / "a", candidate="Ann", slug=slug)
    add_attempt(store, first, slug, disguised(ref), result(slug, {"memory_flat": True}), None, shipped=shipped)
    store2, second = scored_session(tmp_path / "s.db", tmp_path / "b", candidate="Bo", slug=slug)
    add_attempt(store2, second, slug, disguised(ref).replace("my own words", "mine"), result(slug, {"memory_flat": True}),
                None, shipped=shipped)
    mine = session_view(store2, second).exercises[0]
    assert [(m.attempt, m.other) for m in mine.matches] == [(3, "reference fix"), (3, f"session {first} (Ann) #3")]
    assert session_view(store, first).exercises[0].to_json()["similar"][1]["other"] == f"session {second} (Bo) #3"
