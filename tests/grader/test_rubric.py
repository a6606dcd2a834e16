"""Rubric definitions: the shipped ones load, and malformed ones name the problem."""

from pathlib import Path

import pytest

from grader.rubric import RubricError, load_all, load_rubric

GOOD = """
format_version = 1
id = "r"
title = "t"
levels = [1, 2, 3]
[[dimensions]]
id = "a"
title = "A"
weight = 0.25
question = "q"
levels = ["x", "y", "z"]
feedback_prompts = ["p"]
[[dimensions]]
id = "b"
title = "B"
weight = 0.75
question = "q"
levels = ["x", "y", "z"]
feedback_prompts = ["p"]
"""


def test_shipped_rubrics_load():
    rubrics = load_all()
    assert rubrics, "rubrics/ must hold at least one rubric"
    for r in rubrics:
        assert abs(sum(d.weight for d in r.dimensions) - 1) < 1e-9


@pytest.mark.parametrize("levels, expected", [
    ({"a": 1, "b": 1}, 0.0),
    ({"a": 3, "b": 3}, 1.0),
    ({"a": 3, "b": 1}, 0.25),
    ({"a": 2, "b": 2}, 0.5),
])
def test_score_is_weighted_and_normalised(tmp_path: Path, levels, expected):
    p = tmp_path / "r.toml"
    p.write_text(GOOD)
    assert load_rubric(p).score(levels) == pytest.approx(expected)


@pytest.mark.parametrize("levels, message", [
    ({"a": 1}, "no score for dimension 'b'"),
    ({"a": 1, "b": 7}, "not a level"),
    ({"a": 1, "b": 1, "c": 2}, "unknown dimension"),
])
def test_score_rejects_bad_levels(tmp_path: Path, levels, message):
    p = tmp_path / "r.toml"
    p.write_text(GOOD)
    with pytest.raises(RubricError, match=message):
        load_rubric(p).score(levels)


@pytest.mark.parametrize("edit, message", [
    (lambda s: s.replace("weight = 0.75", "weight = 0.5"), "sum to 0.75"),
    (lambda s: s.replace('levels = ["x", "y", "z"]', 'levels = ["x"]', 1), "describes 1 levels"),
    (lambda s: s.replace("question", "questoin", 1), "dimensions[0].question: Field required; add it"),
    (lambda s: s.replace("format_version = 1", "format_version = 9"), "format_version 9"),
    (lambda s: s + "\n[[[", "not valid TOML"),
])
def test_malformed_rubric_names_file_and_field(tmp_path: Path, edit, message):
    p = tmp_path / "r.toml"
    p.write_text(edit(GOOD))
    with pytest.raises(RubricError) as e:
        load_rubric(p)
    assert str(p) in str(e.value) and message in str(e.value)
