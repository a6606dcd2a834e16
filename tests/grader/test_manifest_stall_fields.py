"""The manifest fields of the stall checks, as one-line errors naming file and field."""

from __future__ import annotations

import pytest

from grader.manifest import ManifestError, load_manifest
from tests.grader.checks.stall_runs import KIT


@pytest.mark.parametrize("old, new, says", [
    ("max_p99_over_median = 6.0", "max_p99_over_median = 1.0", "max_p99_over_median: Input should be greater than 1"),
    ("min_steps = 100", "min_steps = 5", "min_steps: Input should be greater than or equal to 20"),
    ("interval = 50", "interval = 0", "interval: Input should be greater than 0"),
    ('copies = ["artifacts/"]', 'copies = ["/abs/artifacts/"]', "copies: give paths relative"),
    ("slack = 40", "slack = 40\nslak = 3", "slak: Extra inputs are not permitted; remove it"),
    ("copy_slack = 120", "copy_slack = -1", "copy_slack: Input should be greater than or equal to 0"),
    ('path = "out/ckpt.pt"\n', "", "path: Field required; add it"),
    ("min_size_of_reference = 0.9", "min_size_of_reference = 1.5", "less than or equal to 1"),
])
def test_manifest_fields_of_the_stall_checks(tmp_path, old, new, says):
    src = KIT / "exercises" / "periodic-stall"
    text = (src / "exercise.toml").read_text()
    assert old in text, "the shipped manifest changed: update this edit"
    d = tmp_path / "periodic-stall"
    d.mkdir()
    (d / "train.py").write_text("")
    (d / "exercise.toml").write_text(text.replace(old, new, 1))
    with pytest.raises(ManifestError) as e:
        load_manifest(d)
    assert says in str(e.value) and "exercise.toml" in str(e.value), str(e.value)
