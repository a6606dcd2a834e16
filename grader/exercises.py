"""Finding exercises and their reference solutions on disk."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from grader.manifest import MANIFEST, Manifest, ManifestError, load_manifest

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


def exercises_dir(root: Path | None = None) -> Path:
    return (root or kit_root()) / "exercises"


def discover(root: Path | None = None) -> tuple[list[Exercise], list[str]]:
    """Every exercise that loads, and one error line for each that does not."""
    found, errors = [], []
    base = exercises_dir(root)
    if not base.is_dir():
        return [], []
    for d in sorted(p for p in base.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
        if not (d / MANIFEST).exists():
            continue
        try:
            found.append(_exercise(load_manifest(d / MANIFEST), d, root))
        except ManifestError as e:
            errors.append(str(e))
    return found, errors


def find(slug: str, root: Path | None = None) -> Exercise:
    d = exercises_dir(root) / slug
    if not (d / MANIFEST).exists():
        names, _ = discover(root)
        known = ", ".join(e.slug for e in names) or "none found"
        raise ManifestError(f"no exercise {slug!r} (known: {known}); see `trainwreck list`")
    return _exercise(load_manifest(d / MANIFEST), d, root)


def _exercise(m: Manifest, d: Path, root: Path | None) -> Exercise:
    return Exercise(manifest=m, dir=d, solution_dir=(root or kit_root()) / "solutions" / m.slug)
