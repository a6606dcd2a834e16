"""Rubric definitions (format 2): the shipped ones load, malformed ones name file and field, the
tree is scored as weighted means, extra dimensions merge, follow-ups follow the evidence."""

from pathlib import Path
from types import SimpleNamespace

import pytest

from grader.errors import TrainwreckError
from grader.rubric import RubricError, exercise_followups, for_exercise, load_all, load_rubric, rubric_id_for

GOOD = """
format_version = 2
id = "r"
title = "t"
kind = "debugging"
levels = [1, 2, 3, 4]
[[dimensions]]
id = "a"
title = "A"
weight = 1.0
question = "q"
levels = ["1: w", "2: x", "3: y", "4: z"]
[[dimensions]]
id = "p"
title = "P"
weight = 3.0
question = "parent"
  [[dimensions.children]]
  id = "b"
  title = "B"
  weight = 1.0
  question = "q"
  levels = ["1: w", "2: x", "3: y", "4: z"]
  [[dimensions.children]]
  id = "c"
  title = "C"
  weight = 3.0
  question = "q"
  levels = ["1: w", "2: x", "3: y", "4: z"]
[feedback]
strength_prompt = "s"
improvement_prompt = "i"
revision_minutes = 12
watch_for = ["w"]
[[followups]]
question = "always"
[[followups]]
question = "shard?"
when = { check = "sample_partition", passed = false }
[[followups]]
question = "ever leaked?"
when = { check = "memory_flat", passed = false, attempt = "any" }
[[followups]]
question = "fast?"
when = { check = "throughput", passed = true }
"""


def write(tmp_path: Path, text: str = GOOD, name: str = "r") -> Path:
    p = tmp_path / f"{name}.toml"
    p.write_text(text)
    return p


def test_shipped_rubrics_load_and_cover_both_kinds():
    rubrics = {r.id: r for r in load_all()}
    assert {"distributed-debugging", "distributed-optimisation"} <= set(rubrics)
    assert rubrics["distributed-optimisation"].kind == "optimisation"
    for r in rubrics.values():
        assert r.leaves() and 10 <= r.feedback.revision_minutes <= 15
        # every leaf describes every level, prefixed with the level
        for d in r.leaves():
            assert [x.split(":")[0] for x in d.levels] == [str(lv) for lv in r.levels]


@pytest.mark.parametrize("levels, expected", [
    ({"a": 1, "b": 1, "c": 1}, {"": 1.0, "p": 1.0}),
    ({"a": 4, "b": 4, "c": 4}, {"": 4.0, "p": 4.0}),
    # p = (1*2 + 3*4)/4 = 3.5; root = (1*1 + 3*3.5)/4 = 2.875
    ({"a": 1, "b": 2, "c": 4}, {"": 2.875, "p": 3.5}),
    # partly scored: a parent averages the scored children only
    ({"b": 2}, {"": 2.0, "p": 2.0, "a": None, "c": None}),
    ({}, {"": None, "p": None}),
])
def test_tree_is_scored_as_weighted_means(tmp_path, levels, expected):
    scores = load_rubric(write(tmp_path)).score(levels)
    for k, v in expected.items():
        assert scores[k] == (pytest.approx(v) if v is not None else None), k


@pytest.mark.parametrize("levels, message", [
    ({"a": 7}, "a: 7 is not a level; use one of 1, 2, 3, 4"),
    ({"p": 3}, "'p' is a parent"),
    ({"zz": 2}, "no dimension 'zz' in rubric 'r'"),
    ({"a": True}, "is not a level"),
])
def test_score_rejects_bad_levels(tmp_path, levels, message):
    with pytest.raises(RubricError, match=message):
        load_rubric(write(tmp_path)).score(levels)


def test_normalised_maps_levels_to_unit_interval(tmp_path):
    r = load_rubric(write(tmp_path))
    assert (r.normalised(1.0), r.normalised(4.0), r.normalised(2.5), r.normalised(None)) == (0.0, 1.0, 0.5, None)


@pytest.mark.parametrize("edit, field_message", [
    (lambda s: s.replace("format_version = 2", "format_version = 1"), "format_version: format_version 1 is not 2"),
    (lambda s: s.replace('kind = "debugging"', 'kind = "vibes"'), "kind: Input should be"),
    (lambda s: s.replace("weight = 3.0", "weight = -1", 1), "dimensions[1].weight: Input should be greater than 0"),
    (lambda s: s.replace('["1: w", "2: x", "3: y", "4: z"]', '["1: w"]', 1), "dimensions[0].levels: describes 1 levels"),
    (lambda s: s.replace('"3: y", "4: z"]\n[feedback]', '"2: y", "4: z"]\n[feedback]'),
     'dimensions[1].children[1].levels[2]: does not start with "3: "'),
    (lambda s: s.replace('id = "c"', 'id = "a"'), "id 'a' is used more than once"),
    (lambda s: s.replace('id = "c"', 'id = "C!"'), "dimensions[1].children[1].id: String should match"),
    (lambda s: s.replace("revision_minutes = 12", "revision_minutes = 30"), "feedback.revision_minutes"),
    (lambda s: s.replace("strength_prompt", "strenght_prompt"), "feedback.strength_prompt: Field required; add it"),
    (lambda s: s.replace('check = "sample_partition", ', ""), "followups[1].when.check: Field required"),
    (lambda s: s.replace('attempt = "any"', 'attempt = "some"'), "followups[2].when.attempt"),
    (lambda s: s.replace('  question = "q"\n  levels = ["1: w", "2: x", "3: y", "4: z"]\n  [[dimensions.children]]',
                         '  levels = ["1: w", "2: x", "3: y", "4: z"]\n  [[dimensions.children]]'),
     "leaf (scored) and has no question"),
    (lambda s: s.replace('id = "r"', 'id = "other"'), "id: 'other' differs from the file name 'r'"),
    (lambda s: s + "\n[[[", "not valid TOML"),
])
def test_malformed_rubric_names_file_and_field(tmp_path, edit, field_message):
    p = write(tmp_path, edit(GOOD))
    with pytest.raises(RubricError) as e:
        load_rubric(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}: ") and field_message in msg and "\n" not in msg


@pytest.mark.parametrize("manifest, rubric", [
    (SimpleNamespace(), "distributed-debugging"),
    (SimpleNamespace(throughput=object()), "distributed-optimisation"),
    (SimpleNamespace(rubric="r", throughput=object()), "r"),
])
def test_rubric_named_or_defaulted(manifest, rubric):
    assert rubric_id_for(manifest) == rubric


def test_extra_dimensions_merge_and_clashes_name_the_manifest(tmp_path):
    (tmp_path / "rubrics").mkdir()
    write(tmp_path / "rubrics")
    extra = {"id": "ckpt", "title": "Checkpoint design", "weight": 2.0, "question": "q",
             "levels": ["1: a", "2: b", "3: c", "4: d"]}
    m = SimpleNamespace(rubric="r", rubric_dimensions=[extra])
    r = for_exercise(m, "ex/exercise.toml", root=tmp_path)
    assert [d.id for d in r.leaves()] == ["a", "b", "c", "ckpt"]
    assert r.score({"a": 1, "b": 1, "c": 1, "ckpt": 4})[""] == pytest.approx((1 + 3 + 2 * 4) / 6)
    m = SimpleNamespace(rubric="r", rubric_dimensions=[{**extra, "id": "b"}])
    with pytest.raises(RubricError, match=r"^ex/exercise.toml: rubric_dimensions: id 'b' is already in rubric 'r'"):
        for_exercise(m, "ex/exercise.toml", root=tmp_path)
    m = SimpleNamespace(rubric="r", rubric_dimensions=[{**extra, "weight": 0}])
    with pytest.raises(RubricError, match=r"^ex/exercise.toml: rubric_dimensions\[0\]\.weight"):
        for_exercise(m, "ex/exercise.toml", root=tmp_path)
    with pytest.raises(RubricError, match="no rubric 'nope'"):
        for_exercise(SimpleNamespace(rubric="nope"), root=tmp_path)


def result(**verdicts):
    return {"checks": [{"name": n, "passed": p} for n, p in verdicts.items()]}


@pytest.mark.parametrize("attempts, questions", [
    ([], ["always"]),  # a scenario with no automatic grading: the unconditional ones only
    ([result(sample_partition=False)], ["always", "shard?"]),
    ([result(sample_partition=False), result(sample_partition=True)], ["always"]),
    ([result(memory_flat=False), result(memory_flat=True)], ["always", "ever leaked?"]),
    ([result(throughput=True)], ["always", "fast?"]),
    ([result(throughput=False)], ["always"]),
])
def test_followups_follow_the_evidence(tmp_path, attempts, questions):
    selected = load_rubric(write(tmp_path)).select_followups(attempts)
    assert [s.followup.question for s in selected] == questions
    if len(selected) > 1:
        assert "attempt" in selected[1].because


def test_exercise_followup_bank(tmp_path):
    """The exercise's staff-level bank (grader.questions' format) as rubric follow-ups."""
    bank = tmp_path / "rubrics" / "followups"
    bank.mkdir(parents=True)
    (tmp_path / "exercises" / "ex").mkdir(parents=True)
    (tmp_path / "exercises" / "ex" / "exercise.toml").write_text('[[checks]]\nname = "completes"\n')
    (bank / "ex.toml").write_text(
        'format_version = 1\nexercise = "ex"\n[[followups]]\nid = "own"\ntheme = "exercise"\nquestion = "own"\n'
        'strong_answer = "s"\nweak_answer = "w"\nwhen = { check = "completes", passed = false }\n')
    got = exercise_followups("ex", tmp_path)
    assert [(f.question, f.weak_answer, f.when.check, f.when.passed) for f in got] == [("own", "w", "completes", False)]
    assert exercise_followups("other", tmp_path) == []
    (bank / "ex.toml").write_text('format_version = 1\nexercise = "ex"\n[[followups]]\nquestoin = "x"\n')
    with pytest.raises(TrainwreckError, match=r"ex.toml: followups\[0\]\."):
        exercise_followups("ex", tmp_path)
