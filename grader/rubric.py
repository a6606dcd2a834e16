"""Interviewer rubrics (``rubrics/<id>.toml``, ``format_version = 2``).

A rubric is a tree of dimensions: leaves are scored by people at one of the rubric's levels (1-4),
a parent's score is the weighted mean of its scored children (weights are relative to siblings).
It also carries the feedback round every activity ends with (one strength, one improvement, a
revision window) and follow-up questions keyed to the grader's evidence.

This module loads and checks the definitions (errors are one line, ``<file>: <field>: <problem>;
<fix>``), merges an exercise's extra dimensions, scores a set of levels, and picks the follow-ups
a result calls for, so that sessions and reports never do arithmetic or matching of their own.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from grader.errors import RubricError
from grader.exercises import kit_root
from grader.files import read_toml
from grader.manifest import describe_validation_error

FORMAT_VERSION = 2
DEFAULT_RUBRIC = "distributed-debugging"
OPTIMISATION_RUBRIC = "distributed-optimisation"
FOLLOWUPS_DIR = "followups"  # rubrics/followups/<exercise slug>.toml: per-exercise follow-up banks


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Dimension(_Strict):
    id: str = Field(pattern=r"^[a-z][a-z0-9_-]*$")
    title: str = Field(min_length=1)
    weight: float = Field(1.0, gt=0, description="relative to its siblings")
    question: str = ""
    levels: list[str] = []  # one descriptor per rubric level, "<level>: <descriptor>"
    strong_answer: str | None = None
    children: list[Dimension] = []

    @model_validator(mode="after")
    def _leaf(self) -> Dimension:
        if not self.children and not self.question.strip():
            raise ValueError(f"dimension {self.id!r} is a leaf (scored) and has no question; add one")
        if not self.children and not self.levels:
            raise ValueError(f"dimension {self.id!r} is a leaf (scored) and describes no levels; add levels")
        return self

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def descriptor(self, level: int) -> str:
        """The descriptor of ``level`` without its "<level>: " prefix."""
        for d in self.levels:
            head, _, rest = d.partition(":")
            if head.strip() == str(level):
                return rest.strip()
        return ""


class When(_Strict):
    """When a follow-up applies: a check of the result, and its verdict (any verdict when left out)."""

    check: str = Field(min_length=1)
    passed: bool | None = None
    # which attempt's result decides: the latest (default), any of them, or the first
    attempt: Literal["last", "any", "first"] = "last"


class Followup(_Strict):
    question: str = Field(min_length=1)
    strong_answer: str | None = None
    weak_answer: str | None = None  # what a weak answer misses (the exercise banks say)
    theme: str | None = None  # the staff-level theme of an exercise bank's question
    when: When | None = None  # left out: always shown


class Feedback(_Strict):
    strength_prompt: str = Field(min_length=1)
    improvement_prompt: str = Field(min_length=1)
    revision_minutes: int = Field(ge=10, le=15)
    watch_for: list[str] = Field(min_length=1)


class Rubric(_Strict):
    format_version: int
    id: str = Field(pattern=r"^[a-z][a-z0-9_-]*$")
    title: str = Field(min_length=1)
    kind: Literal["debugging", "optimisation", "design"]
    summary: str = ""
    levels: list[int] = Field(min_length=2)
    dimensions: list[Dimension] = Field(min_length=1)
    feedback: Feedback
    followups: list[Followup] = []

    @field_validator("format_version")
    @classmethod
    def _version(cls, v: int) -> int:
        if v != FORMAT_VERSION:
            raise ValueError(f"format_version {v} is not {FORMAT_VERSION}; migrate the file to format {FORMAT_VERSION}")
        return v

    @field_validator("levels")
    @classmethod
    def _levels(cls, v: list[int]) -> list[int]:
        if v != sorted(set(v)):
            raise ValueError("levels must be increasing and distinct, e.g. [1, 2, 3, 4]")
        return v

    # ---- the tree ----------------------------------------------------------------------------
    def walk(self) -> Iterator[tuple[Dimension, int, str | None]]:
        """Every dimension, depth-first, with its depth and its parent's id."""
        def rec(dims, depth, parent):
            for d in dims:
                yield d, depth, parent
                yield from rec(d.children, depth + 1, d.id)
        yield from rec(self.dimensions, 0, None)

    def leaves(self) -> list[Dimension]:
        return [d for d, _, _ in self.walk() if d.is_leaf]

    def dimension(self, dim_id: str) -> Dimension | None:
        return next((d for d, _, _ in self.walk() if d.id == dim_id), None)

    # ---- scoring -----------------------------------------------------------------------------
    def check_levels(self, levels: dict[str, int], where: str = "scores") -> None:
        """Raise a one-line RubricError for an unknown dimension, a parent given a level, or a
        level the rubric does not have."""
        leaves = {d.id for d in self.leaves()}
        for dim_id, level in levels.items():
            if dim_id not in leaves:
                parent = self.dimension(dim_id)
                why = (f"{dim_id!r} is a parent (its score is the weighted mean of its children)" if parent
                       else f"no dimension {dim_id!r} in rubric {self.id!r}")
                raise RubricError(f"{where}: {dim_id}: {why}; score one of: {', '.join(sorted(leaves))}")
            if isinstance(level, bool) or level not in self.levels:
                raise RubricError(f"{where}: {dim_id}: {level!r} is not a level; use one of "
                                  f"{', '.join(map(str, self.levels))}")

    def score(self, levels: dict[str, int]) -> dict[str, float | None]:
        """Per dimension id (leaves and parents), its score on the rubric's level scale: a leaf's
        level, a parent's weighted mean over its scored children; None where nothing under it is
        scored. The key ``""`` is the whole rubric's score."""
        self.check_levels(levels)
        out: dict[str, float | None] = {}

        def rec(dims: list[Dimension]) -> float | None:
            parts = []
            for d in dims:
                s = float(levels[d.id]) if d.is_leaf and d.id in levels else (rec(d.children) if d.children else None)
                out[d.id] = s
                if s is not None:
                    parts.append((d.weight, s))
            total = sum(w for w, _ in parts)
            return sum(w * s for w, s in parts) / total if total else None

        out[""] = rec(self.dimensions)
        return out

    def normalised(self, value: float | None) -> float | None:
        """A level-scale score as a share of the way from the lowest level (0) to the highest (1)."""
        if value is None:
            return None
        lo, hi = self.levels[0], self.levels[-1]
        return (value - lo) / (hi - lo)

    # ---- follow-ups --------------------------------------------------------------------------
    def select_followups(self, results: list[dict[str, Any]], extra: Sequence[Followup] = ()) -> list[Selected]:
        """The follow-ups that apply, given the results of a candidate's attempts (oldest first;
        result.json dicts). Unconditional ones always apply; an exercise with no attempt (a
        scenario scored by the interviewer alone) gets only those."""
        out = []
        for f in [*self.followups, *extra]:
            why = _applies(f.when, results)
            if why is not None:
                out.append(Selected(f, why))
        return out


Dimension.model_rebuild()


@dataclass(frozen=True)
class Selected:
    followup: Followup
    because: str  # the evidence that selected it, e.g. "sample_partition failed in attempt 3"


def _applies(when: When | None, results: list[dict[str, Any]]) -> str | None:
    if when is None:
        return "always asked"
    numbered = list(enumerate(results, start=1))
    pool = {"last": numbered[-1:], "first": numbered[:1], "any": numbered}[when.attempt]
    for n, res in pool:
        c = next((c for c in res.get("checks", []) if c.get("name") == when.check), None)
        if c is None:
            continue
        if when.passed is None or bool(c.get("passed")) == when.passed:
            verdict = "passed" if c.get("passed") else "failed"
            return f"{when.check} {verdict} in attempt {n}"
    return None


# ---- loading ---------------------------------------------------------------------------------
def _read_toml(path: Path) -> dict[str, Any]:
    return read_toml(path, RubricError)


def _duplicate_ids(dims: list[Dimension]) -> str | None:
    seen: set[str] = set()

    def rec(ds):
        for d in ds:
            if d.id in seen:
                return d.id
            seen.add(d.id)
            dup = rec(d.children)
            if dup:
                return dup
        return None
    return rec(dims)


def _check_tree(path: Path, r: Rubric) -> None:
    dup = _duplicate_ids(r.dimensions)
    if dup:
        raise RubricError(f"{path}: dimensions: id {dup!r} is used more than once; give each dimension an id of its own")
    for d, _, _ in r.walk():
        field = _field_of(r, d.id)
        if d.levels and len(d.levels) != len(r.levels):
            raise RubricError(f"{path}: {field}.levels: describes {len(d.levels)} levels, the rubric has "
                              f"{len(r.levels)}; write one descriptor per level")
        for k, (lv, text) in enumerate(zip(r.levels, d.levels)):
            if not re.match(rf"^\s*{lv}\s*:\s*\S", text):
                raise RubricError(f"{path}: {field}.levels[{k}]: does not start with \"{lv}: \"; write "
                                  f"\"{lv}: <what level {lv} looks like>\"")


def _field_of(r: Rubric, dim_id: str) -> str:
    """``dimensions[1].children[0]`` for a dimension id."""
    def rec(dims, prefix):
        for i, d in enumerate(dims):
            here = f"{prefix}[{i}]"
            if d.id == dim_id:
                return here
            found = rec(d.children, f"{here}.children")
            if found:
                return found
        return None
    return rec(r.dimensions, "dimensions") or "dimensions"


def load_rubric(path: Path) -> Rubric:
    path = Path(path)
    data = _read_toml(path)
    try:
        r = Rubric.model_validate(data)
    except ValidationError as e:
        raise RubricError(describe_validation_error(path, e)) from None
    if r.id != path.stem:
        raise RubricError(f"{path}: id: {r.id!r} differs from the file name {path.stem!r}; make them the same")
    _check_tree(path, r)
    return r


def rubrics_dir(root: Path | None = None) -> Path:
    return (root or kit_root()) / "rubrics"


def load_all(root: Path | None = None) -> list[Rubric]:
    return [load_rubric(p) for p in sorted(rubrics_dir(root).glob("*.toml"))]


def find_rubric(rubric_id: str, root: Path | None = None) -> Rubric:
    path = rubrics_dir(root) / f"{rubric_id}.toml"
    if not path.exists():
        known = ", ".join(p.stem for p in sorted(rubrics_dir(root).glob("*.toml"))) or "none"
        raise RubricError(f"{path}: no rubric {rubric_id!r} (known: {known}); name one of them in the "
                          "exercise's `rubric` field")
    return load_rubric(path)


# ---- an exercise's rubric --------------------------------------------------------------------
def rubric_id_for(manifest: Any) -> str:
    """The rubric an exercise names (``rubric = "..."`` in its manifest), else the optimisation
    rubric for an exercise with a throughput check, else the debugging rubric."""
    named = getattr(manifest, "rubric", None)
    if named:
        return named
    return OPTIMISATION_RUBRIC if getattr(manifest, "throughput", None) else DEFAULT_RUBRIC


def _as_dict(x: Any) -> dict[str, Any]:
    return x.model_dump() if hasattr(x, "model_dump") else dict(x)


def for_exercise(manifest: Any, manifest_path: Path | str = "exercise.toml", root: Path | None = None) -> Rubric:
    """The exercise's rubric with its extra dimensions (``[[rubric_dimensions]]`` in the manifest)
    appended at the top of the tree. An id that clashes names the manifest and the field."""
    base = find_rubric(rubric_id_for(manifest), root)
    extra = list(getattr(manifest, "rubric_dimensions", None) or [])
    if not extra:
        return base
    dims = []
    for k, d in enumerate(extra):
        try:
            dims.append(Dimension.model_validate(_as_dict(d)))
        except ValidationError as e:
            msg = describe_validation_error(Path(manifest_path), e)
            path, _, rest = msg.partition(": ")
            raise RubricError(f"{path}: rubric_dimensions[{k}].{rest}") from None
    merged = base.model_copy(update={"dimensions": [*base.dimensions, *dims]})
    dup = _duplicate_ids(merged.dimensions)
    if dup:
        raise RubricError(f"{manifest_path}: rubric_dimensions: id {dup!r} is already in rubric {base.id!r}; "
                          "give the exercise's dimension an id of its own")
    _check_tree(Path(manifest_path), merged)
    return merged


def exercise_followups(slug: str, root: Path | None = None) -> list[Followup]:
    """An exercise's own staff-level bank (``rubrics/followups/<slug>.toml``, loaded and checked by
    ``grader.questions``) as rubric follow-ups, or none."""
    from grader.questions import bank_dir, load_bank

    if not (bank_dir(root) / f"{slug}.toml").is_file():
        return []
    return [Followup(question=f.question, strong_answer=f.strong_answer, weak_answer=f.weak_answer, theme=f.theme,
                     when=When(check=f.when.check, passed=f.when.passed) if f.when else None)
            for f in load_bank(slug, root).followups]
