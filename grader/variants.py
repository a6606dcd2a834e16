"""The variant corpus (``tests/variants/<slug>/<name>/``): fixes nobody wrote as the reference
does, each with the verdict it must get and why. A valid fix in another style must pass; a partial
fix or a symptom patch must fail; a cheat must fail. ``trainwreck verify --variants`` grades every
variant as a candidate's workspace and reports each disagreement.

A variant folder holds either the exercise's editable files as the variant writes them, or
``fix.patch``: a unified diff against the exercise's broken files (``--- a/train.py`` /
``+++ b/train.py``), which reads as the change a candidate made and survives unrelated edits of
the broken script. And ``variant.toml``::

    format_version = 1
    class = "valid"          # valid | partial | cheat
    expect = "pass"          # pass | fail
    why = "what it does, and why that is the verdict"
    must_fail = ["memory_flat"]   # for expect = "fail": checks that must be among the failing ones
    says = "MB per step"          # optional: text one failing check's message must hold
    throughput = "quick"          # quick (one side-by-side round) | full (the manifest's rounds) |
                                  # skip (no rounds: for a variant that fails on correctness)
    ci = true                     # in CI's tier (`verify --variants --ci`): the corpus graded in full
                                  # takes hours on 2 cores, CI grades a few of each class per exercise
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from grader.errors import ManifestError
from grader.files import read_toml
from grader.manifest import describe_validation_error
from grader.result import GradeResult
from harness.executor import Executor, Sandboxed

FORMAT_VERSION = 1
VARIANT = "variant.toml"


class VariantSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    format_version: int
    kind: Literal["valid", "partial", "cheat"] = Field(alias="class")
    expect: Literal["pass", "fail"]
    why: str = Field(min_length=10)
    must_fail: list[str] = []
    says: str | None = None
    throughput: Literal["quick", "full", "skip"] = "quick"
    ci: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> VariantSpec:
        if self.format_version != FORMAT_VERSION:
            raise ValueError(f"format_version {self.format_version} is not {FORMAT_VERSION}; write {FORMAT_VERSION}")
        if self.kind == "valid" and self.expect != "pass":
            raise ValueError("a valid fix is expected to pass; set expect = \"pass\" or class = \"partial\"")
        if self.kind != "valid" and self.expect != "fail":
            raise ValueError(f"a {self.kind} is expected to fail; set expect = \"fail\"")
        if self.expect == "pass" and (self.must_fail or self.says):
            raise ValueError("must_fail and says describe a failing verdict; leave them out for expect = \"pass\"")
        if self.expect == "pass" and self.throughput == "skip":
            raise ValueError("a variant expected to pass must have its speed measured; use throughput = \"quick\"")
        return self


@dataclass
class Variant:
    slug: str
    name: str
    dir: Path
    spec: VariantSpec

    @property
    def id(self) -> str:
        return f"{self.slug}/{self.name}"


@dataclass
class Outcome:
    variant: Variant
    result: GradeResult | None
    agrees: bool
    problem: str = ""  # why it disagrees
    failed: list[str] = field(default_factory=list)
    wall_s: float | None = None  # the grading's wall time, set by the caller

    def to_json(self) -> dict[str, Any]:
        r = self.result
        return {"variant": self.variant.id, "class": self.variant.spec.kind, "expect": self.variant.spec.expect,
                "got": None if r is None else ("environment" if r.environment_failure else
                                                "pass" if r.passed else "fail"),
                "score": None if r is None else r.score, "failed": self.failed, "agrees": self.agrees,
                "problem": self.problem, "wall_s": self.wall_s,
                "result_json": None if r is None else str(r.result_path)}


def corpus_dir(root: Path | None = None) -> Path:
    from grader.exercises import kit_root

    return (root or kit_root()) / "tests" / "variants"


def load_variant(folder: Path, slug: str) -> Variant:
    path = folder / VARIANT
    if not path.exists():
        raise ManifestError(f"{path}: not found; every variant folder needs a {VARIANT}")
    data = read_toml(path, ManifestError)
    try:
        spec = VariantSpec.model_validate(data)
    except ValidationError as e:
        raise ManifestError(describe_validation_error(path, e)) from None
    return Variant(slug, folder.name, folder, spec)


def discover(slugs: list[str] | None = None, root: Path | None = None, ci_only: bool = False) -> list[Variant]:
    """Every variant (of ``slugs``), or only CI's tier (``ci = true``)."""
    base = corpus_dir(root)
    out = []
    for d in sorted(p for p in base.glob("*/*") if p.is_dir() and not p.name.startswith((".", "_"))):
        slug = d.parent.name
        if slugs and slug not in slugs:
            continue
        v = load_variant(d, slug)
        if v.spec.ci or not ci_only:
            out.append(v)
    return out


def judge(v: Variant, res: GradeResult) -> Outcome:
    """Whether the grading agrees with the variant's expected verdict."""
    failed = [c.name for c in res.checks if not c.passed]
    if res.environment_failure:
        return Outcome(v, res, False, "the grading hit an environment failure: "
                       + next((c.message for c in res.checks if c.environment), ""), failed)
    if v.spec.expect == "pass":
        if res.passed:
            return Outcome(v, res, True, failed=failed)
        first = next(c for c in res.checks if not c.passed) if failed else None
        why = f"{first.name}: {first.message}" if first else "no check failed, yet it did not pass"
        return Outcome(v, res, False, f"expected to pass, failed ({why})", failed)
    if res.passed:
        return Outcome(v, res, False, f"expected to fail, passed with score {res.score}", failed)
    missing = [c for c in v.spec.must_fail if c not in failed]
    if missing:
        return Outcome(v, res, False, f"failed, but not for the reason expected: {', '.join(missing)} passed "
                       f"(it failed {', '.join(failed) or 'nothing'})", failed)
    if v.spec.says and not any(v.spec.says in c.message for c in res.checks if not c.passed):
        return Outcome(v, res, False, f"failed, but no failing check says {v.spec.says!r}", failed)
    return Outcome(v, res, True, failed=failed)


PATCH = "fix.patch"


def workspace(v: Variant, ex, dest: Path) -> Path:
    """The folder to grade: the variant's own files, or the exercise's broken files with
    ``fix.patch`` applied (``git apply``, which needs no repository)."""
    patch = v.dir / PATCH
    if not patch.is_file():
        return v.dir
    dest.mkdir(parents=True, exist_ok=True)
    for f in ex.manifest.editable:
        (dest / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ex.dir / f, dest / f)
    p = subprocess.run(["git", "apply", "--whitespace=nowarn", str(patch.resolve())], cwd=dest,
                       capture_output=True, text=True)
    if p.returncode != 0:
        why = (p.stderr.strip().splitlines() or ["git apply failed"])[0]
        raise ManifestError(f"{patch}: does not apply to exercises/{v.slug}'s files ({why}); regenerate it with "
                            f"`diff -u` against the current broken script")
    return dest


def grade_variant(v: Variant, out_dir: Path, device: str = "auto", progress=lambda s: None,
                  executor: Executor = Sandboxed()) -> Outcome:
    from grader.exercises import find_script
    from grader.grade import GradeOptions, grade

    ex = find_script(v.slug)
    ws = workspace(v, ex, out_dir / "workspace")
    res = grade(ex, GradeOptions(kind="workspace", workspace=ws, out_dir=out_dir / "grade", device=device,
                                 quick_throughput=v.spec.throughput == "quick",
                                 skip_measurements=v.spec.throughput == "skip", executor=executor), progress)
    return judge(v, res)
