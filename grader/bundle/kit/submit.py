"""Hand in your work: pack an exercise's editable files and your DIAGNOSIS.md, each with its
sha256, with this bundle's session id and the time, into one archive for the interviewer, who
imports it into the session (`trainwreck session import`) and grades it there.

    python submit.py [SLUG] [--out PATH] [--json]

The archive goes to ``submissions/<slug>-<UTC time>.tar.gz`` (or PATH; a folder gets that name
inside it). It is written whole or not at all: a half-written archive is never left under its
name. Submit as often as you like; each archive is one attempt once imported.

Standard library only: it runs wherever the bundle runs.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import sys
import tarfile
import tempfile
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
FORMAT = 1
SESSION_FILE = "session.json"  # written by `trainwreck bundle --session`: the session id, the editable files
MANIFEST = "submission.json"  # the archive's first member
FILES = "files"  # the archive's folder of submitted files
DIAGNOSIS = "DIAGNOSIS.md"
MAX_FILE_BYTES = 16 << 20  # the interviewer's import refuses a larger file: a script is far smaller


class SubmitError(Exception):
    """One line naming the problem and the fix."""


def load_session(root: Path = HERE) -> dict:
    path = root / SESSION_FILE
    if not path.is_file():
        raise SubmitError("this bundle is not tied to an interview session, so there is nothing to submit "
                          "to; ask the interviewer for a session bundle (`trainwreck bundle --session ID`)")
    return json.loads(path.read_text(encoding="utf-8"))


def pick_exercise(session: dict, slug: str | None) -> str:
    graded = list(session["exercises"])
    if slug is None:
        if len(graded) == 1:
            return graded[0]
        raise SubmitError(f"this bundle has exercises {', '.join(graded)}; name one: python submit.py SLUG")
    if slug not in graded:
        raise SubmitError(f"no exercise {slug!r} to submit in this bundle (it has: {', '.join(graded) or 'none'})")
    return slug


def collect(folder: Path, names: list[str]) -> dict[str, bytes]:
    """The files to hand in, read once (what is hashed is what is packed). DIAGNOSIS.md is
    optional; every editable file is required."""
    out: dict[str, bytes] = {}
    for name in [*names, DIAGNOSIS]:
        p = folder / name
        if not p.is_file():
            if name == DIAGNOSIS:
                continue
            raise SubmitError(f"{p} is missing; restore it (the bundle's archive has the shipped copy) and "
                              "submit again")
        size = p.stat().st_size
        if size > MAX_FILE_BYTES:
            raise SubmitError(f"{p} is {size >> 20} MiB, more than the {MAX_FILE_BYTES >> 20} MiB a submitted "
                              "file may be; hand in the edited file itself")
        out[name] = p.read_bytes()
    return out


def manifest(session_id: str, slug: str, files: dict[str, bytes], at: datetime) -> dict:
    return {"format": FORMAT, "session": session_id, "exercise": slug,
            "submitted_at": at.isoformat(timespec="seconds"),
            "files": {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}}


def _member(name: str, data: bytes, mtime: float) -> tuple[tarfile.TarInfo, io.BytesIO]:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), 0o644, int(mtime)
    return info, io.BytesIO(data)


def default_name(slug: str, at: datetime) -> str:
    return f"{slug}-{at.strftime('%Y%m%dT%H%M%SZ')}.tar.gz"


def target(out: Path | None, slug: str, at: datetime, root: Path = HERE) -> Path:
    if out is None or out.is_dir():
        folder = out if out is not None else root / "submissions"
        path = folder / default_name(slug, at)
        n = 2
        while path.exists():  # two submissions in one second
            path = folder / default_name(slug, at).replace(".tar.gz", f"-{n}.tar.gz")
            n += 1
        return path
    if out.exists():
        raise SubmitError(f"{out} already exists; give a new file name or a folder with --out")
    return out


def write_atomically(path: Path, members: list[tuple[str, bytes]], mtime: float) -> None:
    """The archive under a temporary name beside ``path``, flushed to disk, then renamed: an
    interrupted submit leaves no archive under the name the interviewer is told."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as raw:
            with tarfile.open(fileobj=raw, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
                for name, data in members:
                    tar.addfile(*_member(name, data, mtime))
            raw.flush()
            os.fsync(raw.fileno())
        umask = os.umask(0)
        os.umask(umask)
        # mkstemp makes it 0600; as a plain new file it is readable by the group (a shared
        # drop folder's, see docs/remote.md)
        os.chmod(tmp, 0o644 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def submit(slug: str | None, out: Path | None, root: Path = HERE, at: datetime | None = None) -> dict:
    session = load_session(root)
    slug = pick_exercise(session, slug)
    spec = session["exercises"][slug]
    at = at or datetime.now(UTC)
    files = collect(root / "exercises" / slug, spec["editable"])
    man = manifest(session["session"], slug, files, at)
    path = target(out, slug, at, root)
    members = [(MANIFEST, (json.dumps(man, indent=2) + "\n").encode())]
    members += [(f"{FILES}/{name}", data) for name, data in files.items()]
    write_atomically(path, members, at.timestamp())
    unchanged = [n for n in spec["editable"] if man["files"][n] == spec["shipped"].get(n)]
    return {**man, "archive": str(path), "bytes": path.stat().st_size, "unchanged": unchanged}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("slug", nargs="?", help="the exercise (needed when the bundle has several)")
    ap.add_argument("--out", type=Path, default=None, help="the archive's path, or a folder for it")
    ap.add_argument("--json", action="store_true", help="print what was submitted as JSON")
    a = ap.parse_args(argv)
    try:
        res = submit(a.slug, a.out)
    except (SubmitError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (ValueError, KeyError, TypeError) as e:
        print(f"error: {SESSION_FILE} is damaged ({type(e).__name__}: {e}); ask the interviewer for a new "
              "bundle", file=sys.stderr)
        return 2
    for name in res["unchanged"]:
        print(f"note: {name} is as shipped (unchanged)", file=sys.stderr)
    if a.json:
        print(json.dumps(res, indent=2))
    else:
        print(f"submitted {res['exercise']} at {res['submitted_at']}: {', '.join(res['files'])}")
        print(f"archive: {res['archive']} ({res['bytes']} bytes)")
        print("send this file to your interviewer; submit again after further changes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
