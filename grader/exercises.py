"""Finding exercises and their reference solutions on disk."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from grader.manifest import MANIFEST, Manifest, ManifestError, load_manifest
from grader.scenario import Scenario, load_scenario, manifest_kind

KIT_ROOT = Path(__file__).resolve().parent.parent


def kit_root() -> Path:
    """The kit's folder (exercises/, solutions/, rubrics/); ``TRAINWRECK_KIT`` points elsewhere (tests,
    teams with exercises of their own). ``TRAINWRECK_HOME`` is another thing: the user's own state."""
    return Path(os.environ.get("TRAINWRECK_KIT", KIT_ROOT)).resolve()


@dataclass(frozen=True)
class Exercise:
    manifest: Manifest
    dir: Path  # exercises/<slug>
    solution_dir: Path  # solutions/<slug>

    @property
    def slug(self) -> str:
        return self.manifest.slug

    @property
    def script(self) -> Path:
        return self.dir / self.manifest.entry

    @property
    def brief(self) -> Path:
        return self.dir / "BRIEF.md"

    @property
    def kind(self) -> Literal["script"]:
        # a literal, so that `ex.kind == "script"` narrows an ``Exercise | Scenario`` for the checker
        return "script"


def exercises_dir(root: Path | None = None) -> Path:
    return (root or kit_root()) / "exercises"


def discover(root: Path | None = None) -> tuple[list[Exercise | Scenario], list[str]]:
    """Every exercise (script or design scenario) that loads, and one error line for each that
    does not: a bad manifest breaks only its own exercise."""
    found, errors = [], []
    base = exercises_dir(root)
    if not base.is_dir():
        return [], []
    for d in sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
        if not (d / MANIFEST).exists():
            continue
        try:
            found.append(_load(d, root))
        except ManifestError as e:
            errors.append(str(e))
    return found, errors


def find(slug: str, root: Path | None = None) -> Exercise | Scenario:
    d = exercises_dir(root) / slug
    if not (d / MANIFEST).exists():
        names, _ = discover(root)
        known = ", ".join(e.slug for e in names) or "none found"
        raise ManifestError(f"no exercise {slug!r} (known: {known}); see `trainwreck list`")
    return _load(d, root)


def find_script(slug: str, root: Path | None = None) -> Exercise:
    """An exercise with a script to run and grade; a design scenario is refused in one line."""
    ex = find(slug, root)
    if isinstance(ex, Scenario):
        raise ManifestError(f"{slug} is a design scenario: there is no script to run or grade; the interviewer "
                            f"scores it (`trainwreck show {slug}` for the brief, `trainwreck session new` to run it)")
    return ex


def _load(d: Path, root: Path | None) -> Exercise | Scenario:
    if manifest_kind(d) == "scenario":
        return load_scenario(d, root)
    return _exercise(load_manifest(d / MANIFEST), d, root)


def _exercise(m: Manifest, d: Path, root: Path | None) -> Exercise:
    return Exercise(manifest=m, dir=d, solution_dir=(root or kit_root()) / "solutions" / m.slug)
