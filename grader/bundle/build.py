"""The candidate bundle: the folder (or ``.tar.gz``) a hiring team sends a candidate before or
instead of a live session.

What goes in: per exercise the candidate's files (brief, broken scripts, recorded logs, baseline)
and a DIAGNOSIS.md template; the ``harness`` package and a small launcher (``run.py``: `trainwreck
run` without the grader); a self-check (``selfcheck.py``) that runs the script and tells pass or
fail on the checks that need no reference run, using the grader's own check functions and only the
modules they import. A session's bundle (``session_id`` given) also carries ``session.json`` (the
session id, each graded exercise's editable files and their hashes as shipped) and ``submit.py``,
which packs the candidate's files into the archive `trainwreck session import` takes.

What stays out: solutions and their NOTES, hints, rubrics, the manifests (they hold the hints and
every check's thresholds), the compute-bound scripts, and every check that needs the reference.
The self-check's thresholds (``selfcheck.json``) are those of its own checks only (with their
reference comparisons off: ``WITHOUT_REFERENCE``), the workload's sizes, and for a speed exercise
the broken script's editable files and the pass bar against it; the checks it cannot judge are
named there with the property each judges. The briefs are shipped with the bundle's commands
(``grader.bundle.commands``).
"""

from __future__ import annotations

import ast
import hashlib
import json
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.bundle.commands import for_bundle
from grader.sessions.errors import SessionError
from grader.sessions.workspace import DIAGNOSIS, candidate_files, diagnosis_template, is_graded

KIT = Path(__file__).resolve().parent / "kit"
# checks a candidate can run without the reference solution's run (in this order), where the
# exercise's spec of them needs no reference (checkpoint_valid compares with the reference's
# checkpoint in some exercises: there it is left to the grading)
SELF_CHECKS = ("completes", "sample_partition", "memory_flat", "workload_intact", "checkpoint_valid",
               "checkpoints_sound", "resume_exact", "world_size_equivalence", "collectives_per_step",
               "step_time_tail")
# a reference comparison that is one signal among others: the self-check judges the others
WITHOUT_REFERENCE = {"memory_flat": {"max_level_over_reference": None},
                     "step_time_tail": {"max_median_over_reference": None}}
# the grader modules the self-check imports; their own kit-internal imports are followed
SEEDS = ["grader.evidence", "grader.checks.base", "grader.throughput",
         *[f"grader.checks.{m}" for m in SELF_CHECKS]]
# importing grader.checks.<x> runs grader/checks/__init__.py, whose registry imports every check
# (those that need the reference too): the bundle gets a stub in its place
STUBS = {"grader.checks": '"""The checks the candidate self-check runs (the bundle holds only these)."""\n',
         # the evidence reader asks grader.exercises where the kit is (to start its checkpoint reader
         # there); the real module loads every manifest
         "grader.exercises": '"""Where the kit is: the root of the bundle."""\n\nfrom pathlib import Path\n\n\n'
                             'def kit_root() -> Path:\n    return Path(__file__).resolve().parents[2]  # grader/exercises/__init__.py\n',
         # the checks name the manifest's types under TYPE_CHECKING only; the real module imports
         # every check the manifests name (the throughput check's spec among them)
         "grader.manifest": '"""The manifest types the checks name for type checking; the bundle has no manifests."""\n'}


@dataclass
class BundleResult:
    path: Path
    exercises: list[str]
    files: int
    bytes: int
    listing: list[str]

    def to_json(self) -> dict[str, Any]:
        return {"bundle": str(self.path), "exercises": self.exercises, "files": self.files, "bytes": self.bytes,
                "listing": self.listing}


def _module_file(root: Path, name: str) -> Path | None:
    base = root / Path(*name.split("."))
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    if base.with_suffix(".py").is_file():
        return base.with_suffix(".py")
    return None


def import_closure(root: Path, seeds: list[str], stubs: dict[str, str]) -> dict[str, Path | None]:
    """Kit modules (``grader.*``, ``harness.*``) the seeds import, transitively, with their
    packages' ``__init__``; a stubbed module maps to None and its imports are not followed."""
    out: dict[str, Path | None] = {}
    todo = list(seeds)
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts)):  # parent packages run first
            pkg = ".".join(parts[:i])
            if pkg not in out:
                todo.append(pkg)
        if name in out:
            continue
        if name in stubs:
            out[name] = None
            continue
        path = _module_file(root, name)
        if path is None:
            continue
        out[name] = path
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                todo += [a.name for a in node.names if a.name.split(".")[0] in ("grader", "harness")]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                    and node.module.split(".")[0] in ("grader", "harness"):
                todo.append(node.module)
                todo += [f"{node.module}.{a.name}" for a in node.names if _module_file(root, f"{node.module}.{a.name}")]
    return out


def self_checkable(c):
    """The check as the self-check runs it (its reference comparisons off), or None where it is
    left to the grading."""
    from grader.checks import REGISTRY

    if c.name not in SELF_CHECKS:
        return None
    c = c.model_copy(update=WITHOUT_REFERENCE.get(c.name, {}))
    return None if REGISTRY[c.name].needs_reference(c) else c


def selfcheck_spec(ex) -> dict[str, Any]:
    """What the self-check needs of one exercise, and nothing else of its manifest. For a speed
    exercise, the broken script's editable files (the candidate's copy is edited in place) and the
    pass bar the grading sets against the broken script: the self-check measures both side by side."""
    from grader.checks import REGISTRY

    m = ex.manifest
    shipped = candidate_files(ex.dir, m)
    checks = [(c, self_checkable(c)) for c in m.checks if c.name in REGISTRY]
    speed = next((c for c in m.checks if c.name == "throughput"), None)
    return {
        "slug": m.slug, "title": m.title, "entry": m.entry, "editable": list(m.editable),
        "world_size": m.world_size, "run": m.run.model_dump(), "workload": m.workload.model_dump(),
        "checks": [s.model_dump() for _, s in checks if s is not None],
        "elsewhere": {c.name: REGISTRY[c.name].property for c, s in checks if s is None and c.name != "throughput"},
        "throughput": None if speed is None else {
            "pass_speedup": speed.pass_speedup,
            "broken": {rel: (ex.dir / rel).read_text(encoding="utf-8") for rel in m.editable}},
        "protected": {str(rel): hashlib.sha256((ex.dir / rel).read_bytes()).hexdigest()
                      for rel in shipped if rel.suffix == ".py" and str(rel) not in m.editable},
    }


def session_spec(session_id: str, exs: list) -> dict[str, Any]:
    """``session.json``: what submit.py packs for each graded exercise, and for which session."""
    return {"format": 1, "session": session_id, "exercises": {
        ex.slug: {"editable": list(ex.manifest.editable),
                  "shipped": {n: hashlib.sha256((ex.dir / n).read_bytes()).hexdigest() for n in ex.manifest.editable}}
        for ex in exs if is_graded(ex.manifest) and ex.manifest.editable}}


def _readme(exs: list, session_id: str | None) -> str:
    text = (KIT / "README.md").read_text(encoding="utf-8")
    listing = "\n".join(f"- `{ex.slug}`: {ex.manifest.title} ({ex.manifest.minutes} min): "
                        f"`exercises/{ex.slug}/BRIEF.md`" for ex in exs)
    handing_in = (KIT / "SUBMIT.md").read_text(encoding="utf-8") if session_id else ""
    return text.replace("{{exercises}}", listing).replace("{{submit}}\n", handing_in)


def build(slugs: list[str], out: Path, session_id: str | None = None) -> BundleResult:
    """The bundle of exercises ``slugs`` at ``out``; with ``session_id``, one a candidate submits
    from into that session."""
    from grader.exercises import find, kit_root

    if not slugs:
        raise SessionError("no exercise given; name one or more slugs (see `trainwreck list`)")
    out = Path(out).resolve()
    archive = out.name.endswith(".tar.gz")
    folder = Path(tempfile.mkdtemp(prefix="bundle-", dir=out.parent if out.parent.exists() else None)) if archive else out
    if not archive and out.exists() and any(out.iterdir()):
        raise SessionError(f"{out} already exists and is not empty; give a new folder or a .tar.gz path with --out")
    exs = [find(s) for s in dict.fromkeys(slugs)]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        specs = {}
        for ex in exs:
            dest = folder / "exercises" / ex.slug
            for rel in candidate_files(ex.dir, ex.manifest):
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ex.dir / rel, dest / rel)
                if rel.suffix == ".md":  # its commands as the bundle has them (grader.bundle.commands)
                    (dest / rel).write_text(for_bundle((ex.dir / rel).read_text(encoding="utf-8"), ex.slug),
                                            encoding="utf-8")
            if not (dest / DIAGNOSIS).exists():  # a design scenario hands its own answer template
                (dest / DIAGNOSIS).write_text(diagnosis_template(ex.manifest.title, ex.slug), encoding="utf-8")
            if is_graded(ex.manifest):
                specs[ex.slug] = selfcheck_spec(ex)
        (folder / "selfcheck.json").write_text(json.dumps({"format": 1, "exercises": specs}, indent=2) + "\n",
                                               encoding="utf-8")
        root = kit_root()
        for p in sorted((root / "harness").rglob("*.py")):
            rel = p.relative_to(root)
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, folder / rel)
        for name, path in import_closure(root, SEEDS, STUBS).items():
            if not name.startswith("grader"):
                continue  # the whole harness is there already
            dest = folder / Path(*name.split("."))
            dest = dest / "__init__.py" if (path is None or path.name == "__init__.py") else dest.with_suffix(".py")
            dest.parent.mkdir(parents=True, exist_ok=True)
            if path is None:
                dest.write_text(STUBS[name], encoding="utf-8")
            else:
                shutil.copy2(path, dest)
        for f in ("run.py", "selfcheck.py"):
            shutil.copy2(KIT / f, folder / f)
        if session_id:
            shutil.copy2(KIT / "submit.py", folder / "submit.py")
            (folder / "session.json").write_text(json.dumps(session_spec(session_id, exs), indent=2) + "\n",
                                                 encoding="utf-8")
        (folder / "README.md").write_text(_readme(exs, session_id), encoding="utf-8")
        listing = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
        if archive:
            out.parent.mkdir(parents=True, exist_ok=True)
            top = out.name[: -len(".tar.gz")]
            with tarfile.open(out, "w:gz") as tar:
                for member in listing:
                    tar.add(folder / member, arcname=f"{top}/{member}", recursive=False)
        size = out.stat().st_size if archive else sum((folder / r).stat().st_size for r in listing)
    finally:
        if archive:
            shutil.rmtree(folder, ignore_errors=True)
    return BundleResult(out, [ex.slug for ex in exs], len(listing), size, listing)
