"""The cases each exercise gets and the configs that hold their expected verdicts (no grading):
every script exercise has a config, its counts meet the minimum or the config says why, every
generated mutant has a verdict written down, and a config that drifts from the fix is one line
naming the file, the field and the fix."""

from __future__ import annotations

import re
import shutil
from functools import cache
from pathlib import Path

import pytest

from grader.cli import main
from grader.errors import ManifestError
from grader.validity.config import MIN_MUTATIONS, MIN_REWRITES
from grader.validity.suite import ALL, build, script_slugs
from tests.grader.validity.scripts import REPO, SLUGS


@cache
def _suite(slug: str, ci_only: bool = False):
    return build(slug, ci_only=ci_only)


def test_every_script_exercise_has_a_validity_config():
    assert script_slugs() == SLUGS
    assert sorted(p.stem for p in (REPO / "tests" / "validity").glob("*.toml")) == SLUGS


@pytest.mark.parametrize("slug", SLUGS)
def test_an_exercise_meets_the_minimum_counts_or_says_why(slug):
    suite = _suite(slug)
    assert not suite.short(), suite.short()
    if len(suite.rewrites) < MIN_REWRITES:
        assert len(suite.config.fewer_rewrites) > 40
    if len(suite.mutations) < MIN_MUTATIONS:
        assert len(suite.config.fewer_mutations) > 40
    assert len(suite.mutations) >= 3, "an exercise with fewer than three mutations tests nothing of its fix"
    names = [c.name for c in suite.cases]
    assert len(names) == len(set(names)) and ALL in names
    for c in suite.cases:
        if c.kind == "rewrite":
            assert (c.spec.kind, c.spec.expect, c.spec.throughput) == ("valid", "pass", "quick")
        else:
            assert c.spec.kind == "partial" and c.spec.expect == "fail" and c.spec.must_fail and c.spec.says
            assert c.breaks
    assert any(c.spec.ci for c in suite.cases), "every exercise has a case in CI's tier"


def test_ci_tier_is_a_few_cases_per_exercise():
    tier = [c for s in SLUGS for c in _suite(s).cases if c.spec.ci]
    assert {c.slug for c in tier} == set(SLUGS)
    assert len(tier) <= 2 * len(SLUGS)


def _kit(tmp_path: Path, slug: str = "sampler-replay") -> Path:
    for part in ("exercises", "solutions"):
        shutil.copytree(REPO / part / slug, tmp_path / part / slug, ignore=shutil.ignore_patterns("logs"))
    (tmp_path / "tests" / "validity").mkdir(parents=True)
    shutil.copy(REPO / "tests" / "validity" / f"{slug}.toml", tmp_path / "tests" / "validity")
    return tmp_path / "tests" / "validity" / f"{slug}.toml"


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize("old, new, says", [
    ("[mutations.revert-hunk-5]", "[mutations.revert-hunk-9]", "mutations.revert-hunk-9: no such mutant"),
    ('touches = "sampler.set_epoch(epoch)"', 'touches = "sampler.set_epoch(0)"', "mutations.revert-hunk-5.touches"),
    ('must_fail = ["sample_partition"]\nsays = "same order"', 'must_fail = ["memory_flat"]\nsays = "x"',
     "must_fail: 'memory_flat' is not a check of sampler-replay's manifest"),
    ("[skip_rewrites]\n", '[skip_rewrites]\nwrap-modle = "a typo of a rewrite name"\n', "skip_rewrites.wrap-modle"),
    ("[mutations.revert-hunk-5]\n", "[mutations.revert-hunk-5]\nskip = true\n", "a skipped mutant has no verdict"),
    ('says = "same order"\n', "", "must name the check that must fail"),
    ("format_version = 1", "format_version = 2", "format_version 2 is not 1"),
])
def test_a_config_that_drifts_is_one_line_naming_file_and_field(tmp_path, old, new, says):
    path = _kit(tmp_path)
    _edit(path, old, new)
    with pytest.raises(ManifestError) as e:
        build("sampler-replay", root=tmp_path)
    assert says in str(e.value) and str(path) in str(e.value) and "\n" not in str(e.value)


def test_a_generated_mutant_without_a_verdict_is_refused_before_grading(tmp_path):
    path = _kit(tmp_path)
    text = path.read_text()
    start = text.index("[mutations.drop-line-143]")
    path.write_text(text[:start] + text[text.index("[mutations.rank0-only-hunk-2]"):])
    with pytest.raises(ManifestError, match="mutations.drop-line-143: no expected verdict for this generated mutant"):
        build("sampler-replay", root=tmp_path)


def test_a_changed_fix_is_caught_by_the_mutants_guard(tmp_path):
    _kit(tmp_path)
    script = tmp_path / "solutions" / "sampler-replay" / "train.py"
    _edit(script, "        sampler.set_epoch(epoch)\n", "        sampler.set_epoch(epoch + 0)\n")
    with pytest.raises(ManifestError, match="touches: the mutant now touches"):
        build("sampler-replay", root=tmp_path)


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    try:
        main(list(args))
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 0
    out = capsys.readouterr()
    return code, out.out, out.err


def test_list_prints_the_cases_without_grading(capsys):
    code, out, _ = _cli(capsys, "verify", "--validity", "lr-scaling", "--list")
    assert code == 0
    assert re.search(r"^lr-scaling: \d+ rewrites", out, re.M)
    assert "mutation revert-hunk-5" in out and "left out drop-line-93" in out


def test_case_picks_the_cases_of_that_name(capsys):
    code, out, _ = _cli(capsys, "verify", "--validity", "lr-scaling", "--list", "--case", "revert-hunk-5")
    assert code == 0 and "mutation revert-hunk-5" in out and "revert-hunk-1 " not in out
    assert "rewrite " not in out


@pytest.mark.parametrize("args, says", [
    (["verify", "--list"], "--list prints the validity suite's generated cases"),
    (["verify", "--case", "x"], "--case picks cases of the validity suite"),
    (["verify", "--validity", "lr-scaling", "--case", "no-such"], "--case no-such: no such case in lr-scaling"),
    (["verify", "--ci"], "--ci selects CI's tier"),
    (["verify", "--variants", "--validity"], "grade one at a time"),
])
def test_validity_flags_used_wrongly_are_one_line(capsys, args, says):
    code, _, err = _cli(capsys, *args)
    assert code == 2 and says in err


def test_the_readme_names_every_rewrite_and_mutation_family():
    from grader.validity.mutations import MUTATIONS
    from grader.validity.rewrites import REWRITES

    text = (REPO / "tests" / "validity" / "README.md").read_text()
    missing = [x.name for x in [*REWRITES, *MUTATIONS] if f"| `{x.name}` |" not in text]
    assert not missing, f"tests/validity/README.md does not describe {missing}"


def test_list_shows_the_mutants_a_new_config_must_write(tmp_path, capsys, monkeypatch):
    # the errors for a missing config or verdict say `--list` shows the cases to write it for: it must
    path = _kit(tmp_path)
    text = path.read_text()
    start = text.index("[mutations.drop-line-143]")
    path.write_text(text[:start] + text[text.index("[mutations.rank0-only-hunk-2]"):])
    suite = build("sampler-replay", root=tmp_path, draft=True)
    assert [m.name for m in suite.unwritten] == ["drop-line-143"]
    assert "drop-line-143" not in {c.name for c in suite.cases}
    path.unlink()
    suite = build("sampler-replay", root=tmp_path, draft=True)
    assert "drop-line-143" in {m.name for m in suite.unwritten} and not suite.mutations
    monkeypatch.setenv("TRAINWRECK_HOME", str(tmp_path / "home"))
    monkeypatch.setattr("grader.exercises.kit_root", lambda: tmp_path)
    code, out, _ = _cli(capsys, "verify", "--validity", "sampler-replay", "--list")
    assert code == 0 and "to write [mutations.drop-line-143]" in out, out


def test_the_ci_tier_is_not_held_to_the_whole_suites_minimum():
    suite = build("lr-scaling", ci_only=True)
    assert suite.cases and not suite.short()
