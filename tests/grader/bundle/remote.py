"""Shared by the remote-flow tests: a session, its bundle, and submission archives written by hand
(a valid one, or one changed in a single way)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from dataclasses import dataclass, field
from pathlib import Path

from grader.bundle.build import KIT
from grader.sessions.lifecycle import new_session
from grader.sessions.store import Store
from tests.conftest import REPO

SLUG = "amp-no-scaler"  # one run plus the cached reference: the quickest grading in the kit
FIX = (REPO / "solutions" / SLUG / "train.py").read_bytes()


@dataclass
class Member:
    name: str
    data: bytes = b""
    kind: bytes = tarfile.REGTYPE
    link: str = ""
    size: int | None = None  # the size the header declares (default: len(data))


@dataclass
class Archive:
    session: str
    exercise: str = SLUG
    submitted_at: str = ""
    files: dict[str, bytes] = field(default_factory=lambda: {"train.py": FIX, "DIAGNOSIS.md": b"# found it\n"})
    manifest: dict | str | bool | None = None  # replaces the one made from the fields above
    extra: list[Member] = field(default_factory=list)  # appended after the files

    def made_manifest(self) -> dict:
        """The manifest submit.py would write for these fields and files."""
        return {"format": 1, "session": self.session, "exercise": self.exercise, "submitted_at": self.submitted_at,
                "files": {n: hashlib.sha256(d).hexdigest() for n, d in self.files.items()}}

    def members(self) -> list[Member]:
        """The archive's members; ``manifest`` False leaves submission.json out, a str is its text."""
        man = self.made_manifest() if self.manifest is None else self.manifest
        out = [] if man is False else [
            Member("submission.json", man.encode() if isinstance(man, str) else json.dumps(man).encode())]
        return out + [Member(f"files/{n}", d) for n, d in self.files.items()] + self.extra


def write(path: Path, members: list[Member]) -> Path:
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for m in members:
            info = tarfile.TarInfo(m.name)
            info.type, info.linkname = m.kind, m.link
            info.size = len(m.data) if m.kind == tarfile.REGTYPE else 0
            if m.size is not None:
                info.size = m.size
            tar.addfile(info, io.BytesIO(m.data) if m.kind == tarfile.REGTYPE else None)
    return path


def session(tmp_path: Path, slugs: list[str] | None = None):
    store = Store.open(tmp_path / "home" / "sessions.db")
    s, exs = new_session(store, "Ada", slugs or [SLUG], root=tmp_path / "ws")
    return store, s, exs


def load_submit():
    """The bundle's submit.py as a module (it is a script, not a package's module)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bundle_submit", KIT / "submit.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
