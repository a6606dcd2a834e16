"""Interviewer rubrics (``rubrics/<id>.toml``): dimensions, level descriptors, feedback prompts.

Rubric scores are given by people; this module only loads and checks the definitions, and turns a
set of per-dimension levels into a weighted score, so that reports never do arithmetic of their own.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from grader.errors import RubricError
from grader.exercises import kit_root
from grader.manifest import describe_validation_error

FORMAT_VERSION = 1


class Dimension(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str = Field(pattern=r"^[a-z][a-z0-9_-]*$")
    title: str
    weight: float = Field(gt=0, le=1)
    question: str
    levels: list[str]
    feedback_prompts: list[str] = Field(min_length=1)


class Rubric(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    format_version: int
    id: str
    title: str
    summary: str = ""
    levels: list[int] = Field(min_length=2)
    dimensions: list[Dimension] = Field(min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> Rubric:
        if self.format_version != FORMAT_VERSION:
            raise ValueError(f"format_version {self.format_version} is not {FORMAT_VERSION}")
        if self.levels != sorted(set(self.levels)):
            raise ValueError("levels must be increasing and distinct, e.g. [1, 2, 3, 4]")
        for d in self.dimensions:
            if len(d.levels) != len(self.levels):
                raise ValueError(f"dimension {d.id!r} describes {len(d.levels)} levels, "
                                 f"the rubric has {len(self.levels)}; describe each level once")
        total = sum(d.weight for d in self.dimensions)
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"dimension weights sum to {total:g}; make them sum to 1")
        if len({d.id for d in self.dimensions}) != len(self.dimensions):
            raise ValueError("dimension ids must be unique")
        return self

    def score(self, levels: dict[str, int]) -> float:
        """Weighted score in [0, 1] from a level per dimension (lowest level = 0, highest = 1)."""
        lo, hi = self.levels[0], self.levels[-1]
        total = 0.0
        for d in self.dimensions:
            if d.id not in levels:
                raise RubricError(f"no score for dimension {d.id!r}; give one of {self.levels}")
            level = levels[d.id]
            if level not in self.levels:
                raise RubricError(f"{d.id}: {level} is not a level; use one of {self.levels}")
            total += d.weight * (level - lo) / (hi - lo)
        unknown = set(levels) - {d.id for d in self.dimensions}
        if unknown:
            raise RubricError(f"unknown dimension(s) {sorted(unknown)}; "
                              f"this rubric has {[d.id for d in self.dimensions]}")
        return total


def load_rubric(path: Path) -> Rubric:
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RubricError(f"{path}: not found") from None
    except tomllib.TOMLDecodeError as e:
        raise RubricError(f"{path}: not valid TOML ({e}); fix the syntax") from None
    try:
        return Rubric.model_validate(data)
    except ValidationError as e:
        raise RubricError(describe_validation_error(path, e)) from None


def rubrics_dir(root: Path | None = None) -> Path:
    return (root or kit_root()) / "rubrics"


def load_all(root: Path | None = None) -> list[Rubric]:
    return [load_rubric(p) for p in sorted(rubrics_dir(root).glob("*.toml"))]
