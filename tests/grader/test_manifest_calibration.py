"""The manifest's [calibration]: how long the fix took to find from the brief alone, checked as
one-line errors naming the file and the field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from grader.manifest import ManifestError, load_manifest

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "exercises" / "grad-accumulation"


def _with(tmp_path: Path, edit) -> Path:
    d = tmp_path / SRC.name
    d.mkdir()
    (d / "train.py").write_text("")
    (d / "exercise.toml").write_text(edit((SRC / "exercise.toml").read_text()))
    return d


def test_the_shipped_calibration_loads_and_fits_the_time_budget():
    m = load_manifest(SRC)
    assert m.calibration is not None and m.calibration.pass_minutes is not None
    assert m.calibration.pass_minutes <= m.minutes


@pytest.mark.parametrize("field, value, says", [
    ("pass_minutes", "1", "pass_minutes is before cause_minutes"),
    ("hints", "-1", "hints: Input should be greater than or equal to 0"),
    ("cause_minutes", "0", "cause_minutes: Input should be greater than 0"),
    ("by", '""', "by: String should have at least 1 character"),
])
def test_a_malformed_calibration_is_one_line_naming_the_field(tmp_path, field, value, says):
    def edit(text: str) -> str:
        head, table, rest = text.partition("[calibration]")  # the exercise's own `hints` come before
        new, n = re.subn(rf"^{field} = .*$", f"{field} = {value}", rest, count=1, flags=re.M)
        assert table and n == 1, f"the shipped manifest's [calibration] has no {field}: update this test"
        return head + table + new
    with pytest.raises(ManifestError) as e:
        load_manifest(_with(tmp_path, edit))
    assert says in str(e.value) and "exercise.toml" in str(e.value), str(e.value)
    assert "\n" not in str(e.value).strip()
