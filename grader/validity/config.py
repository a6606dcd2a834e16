"""``tests/validity/<slug>.toml``: an exercise's expected verdicts for its generated cases, written
down before grading and never adjusted to what the grader says.

    format_version = 1
    # rewrites of the library that apply to the script but not to this exercise, and why
    [skip_rewrites]
    fp16-wire = "the brief asks for the same training in fp32: a 16-bit wire changes the path"
    ci_rewrites = ["all-rewrites"]          # rewrite cases in CI's tier
    fewer_mutations = "why"                 # only where fewer than 10 mutations apply

    [mutations.revert-hunk-2]               # one table per generated mutant, by its name
    touches = "sampler = ResumableDistributedSampler(train_set, shuffle=True, seed=SEED, drop_last=True)"
    must_fail = ["sample_partition"]        # the check(s) that must be among the failing ones
    says = "replayed"                       # text one failing check's message must hold
    why = "what breaks, and why that check is the one to catch it"
    ci = false                              # in CI's tier
    # or, for a mutant that breaks nothing the brief asks for, or only crashes:
    # skip = "why it is not a property-breaking mutation"
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from grader.errors import ManifestError
from grader.files import read_toml
from grader.manifest import describe_validation_error

FORMAT_VERSION = 1
MIN_REWRITES = 15
MIN_MUTATIONS = 10


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Expected(_Strict):
    """The verdict one generated mutant must get."""

    touches: str | None = None
    must_fail: list[str] = []
    says: str | None = None
    why: str = Field(min_length=10)
    skip: bool = False
    ci: bool = False
    throughput: Literal["quick", "full", "skip"] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> Expected:
        if self.skip and (self.must_fail or self.says or self.ci):
            raise ValueError("a skipped mutant has no verdict; leave must_fail, says and ci out, and say why in why")
        if not self.skip and not (self.must_fail and self.says):
            raise ValueError("a mutant must name the check that must fail (must_fail) and text its message must "
                             "hold (says); or set skip = true and say why")
        return self


class ValidityConfig(_Strict):
    format_version: int
    skip_rewrites: dict[str, str] = {}
    ci_rewrites: list[str] = []
    fewer_rewrites: str | None = None
    fewer_mutations: str | None = None
    mutations: dict[str, Expected] = {}

    @model_validator(mode="after")
    def _version(self) -> ValidityConfig:
        if self.format_version != FORMAT_VERSION:
            raise ValueError(f"format_version {self.format_version} is not {FORMAT_VERSION}; write {FORMAT_VERSION}")
        short = [k for k, v in self.skip_rewrites.items() if len(v) < 10]
        if short:
            raise ValueError(f"skip_rewrites.{short[0]}: say why the rewrite does not apply, in a sentence")
        return self


def config_dir(root: Path | None = None) -> Path:
    from grader.exercises import kit_root

    return (root or kit_root()) / "tests" / "validity"


def config_path(slug: str, root: Path | None = None) -> Path:
    return config_dir(root) / f"{slug}.toml"


def load_config(slug: str, root: Path | None = None) -> ValidityConfig:
    path = config_path(slug, root)
    if not path.exists():
        raise ManifestError(f"{path}: not found; every script exercise needs its validity config "
                            f"(`trainwreck verify --validity {slug} --list` shows the cases to write it for)")
    try:
        return ValidityConfig.model_validate(read_toml(path, ManifestError))
    except ValidationError as e:
        raise ManifestError(describe_validation_error(path, e)) from None
