"""Reading a candidate's submission archive (``submit.py`` in a session's bundle writes it).

The archive is untrusted input: whoever holds the bundle can hand in any bytes. It is read as a
stream, never extracted: the decompressed stream is capped (a gzip bomb stops at the cap), each
member must be a regular file named ``submission.json`` or ``files/<relative path>`` (no
absolute path, no ``..``, no link, device or folder, no name twice), within its size limit, and
every file's sha256 must be the one ``submission.json`` gives. What passes is held in memory;
nothing touches the disk here. Which files an exercise accepts is the session's concern
(``grader.bundle.intake``).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import tarfile
import zlib
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path, PurePosixPath

from grader.sessions.errors import SessionError

FORMAT = 1
MANIFEST = "submission.json"
FILES = "files"
DIAGNOSIS = "DIAGNOSIS.md"
MAX_ARCHIVE_BYTES = 32 << 20  # as sent: a few scripts compress to kilobytes
MAX_FILE_BYTES = 16 << 20  # an editable file (grader.submission.MAX_EDITABLE_BYTES)
MAX_DIAGNOSIS_BYTES = 1 << 20
MAX_MANIFEST_BYTES = 64 << 10
MAX_MEMBERS = 32
# the whole decompressed stream, tar headers included: what the members may hold, and slack
MAX_STREAM_BYTES = 2 * MAX_FILE_BYTES + (4 << 20)
MANIFEST_KEYS = {"format", "session", "exercise", "submitted_at", "files"}
_SHA256 = re.compile(r"[0-9a-f]{64}")


class StreamTooLong(Exception):
    pass


class _Capped(io.RawIOBase):
    """A read-only stream that fails once more than ``cap`` bytes have been read from it."""

    def __init__(self, inner: io.BufferedIOBase, cap: int):
        self.inner, self.cap, self.seen = inner, cap, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        data = self.inner.read(len(b))
        self.seen += len(data)
        if self.seen > self.cap:
            raise StreamTooLong
        b[: len(data)] = data
        return len(data)


@dataclass(frozen=True)
class Submitted:
    """A submission archive's content, checked as an archive (not yet against a session)."""

    path: Path
    session: str
    exercise: str
    submitted_at: str  # ISO 8601 with its offset, as the candidate's machine gave it
    files: dict[str, bytes]  # file name (relative to the exercise folder) -> content
    sha256: dict[str, str]
    raw: bytes  # the archive's bytes, as read once and checked

    @property
    def at(self) -> datetime:
        return datetime.fromisoformat(self.submitted_at)


def shown(name: str) -> str:
    """A name from the archive as an error line may show it: one with a newline or a terminal
    escape in it is quoted with those escaped (the line stays one line, the terminal untouched)."""
    return name if name.isprintable() else repr(name)


def _fail(path: Path, why: str) -> SessionError:
    return SessionError(f"{path}: {why}; ask the candidate to run `python submit.py` again and send that file")


def _member_name(path: Path, m: tarfile.TarInfo) -> str:
    name = m.name
    parts = PurePosixPath(name).parts
    if name.startswith("/") or ".." in parts or "\\" in name:
        raise _fail(path, f"member {name!r} points outside the archive")
    if m.issym() or m.islnk():
        raise _fail(path, f"member {name!r} is a {'symbolic' if m.issym() else 'hard'} link to {m.linkname!r}, "
                          "not a file")
    if not m.isfile():
        raise _fail(path, f"member {name!r} is not a regular file")
    if name != MANIFEST and (len(parts) < 2 or parts[0] != FILES or any(p in ("", ".") for p in parts)):
        raise _fail(path, f"member {name!r} is neither {MANIFEST} nor a file under {FILES}/")
    limit = MAX_MANIFEST_BYTES if name == MANIFEST else MAX_DIAGNOSIS_BYTES if parts[-1] == DIAGNOSIS and \
        len(parts) == 2 else MAX_FILE_BYTES
    if m.size > limit:
        raise _fail(path, f"member {name!r} is {m.size} bytes, more than the {limit} it may be")
    return name


def _raw(path: Path) -> bytes:
    """The archive's bytes, read once: what is checked is what is kept."""
    with open(path, "rb") as f:
        raw = f.read(MAX_ARCHIVE_BYTES + 1)
    if len(raw) > MAX_ARCHIVE_BYTES:
        raise _fail(path, f"more than the {MAX_ARCHIVE_BYTES >> 20} MiB a submission may be")
    return raw


def _members(path: Path, raw: bytes) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as gz:
            stream = io.BufferedReader(_Capped(gz, MAX_STREAM_BYTES))
            with tarfile.open(fileobj=stream, mode="r|") as tar:  # a stream: read in order, never seeked
                for m in tar:
                    if len(out) >= MAX_MEMBERS:
                        raise _fail(path, f"more than {MAX_MEMBERS} members")
                    name = _member_name(path, m)
                    if name in out:
                        raise _fail(path, f"member {name!r} appears twice")
                    f = tar.extractfile(m)
                    out[name] = f.read() if f is not None else b""
    except StreamTooLong:
        raise _fail(path, f"decompresses to more than {MAX_STREAM_BYTES >> 20} MiB") from None
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        raise _fail(path, f"not a submission archive (a .tar.gz from submit.py): {type(e).__name__}: {e}") from None
    return out


def _manifest(path: Path, data: bytes | None) -> dict:
    if data is None:
        raise _fail(path, f"no {MANIFEST} in it")
    try:
        man = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise _fail(path, f"{MANIFEST} is not JSON ({e})") from None
    if not isinstance(man, dict) or set(man) != MANIFEST_KEYS:
        got = sorted(man) if isinstance(man, dict) else type(man).__name__
        raise _fail(path, f"{MANIFEST} holds {got}, not the keys {sorted(MANIFEST_KEYS)}")
    if man["format"] != FORMAT:
        raise _fail(path, f"{MANIFEST} is format {man['format']!r}; this trainwreck reads format {FORMAT}")
    for key in ("session", "exercise", "submitted_at"):
        if not isinstance(man[key], str) or not man[key]:
            raise _fail(path, f"{MANIFEST}: {key} is {man[key]!r}, not a name")
    try:
        at = datetime.fromisoformat(man["submitted_at"])
    except ValueError:
        raise _fail(path, f"{MANIFEST}: submitted_at {man['submitted_at']!r} is not an ISO 8601 time") from None
    if at.tzinfo is None:
        raise _fail(path, f"{MANIFEST}: submitted_at {man['submitted_at']!r} has no UTC offset")
    files = man["files"]
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) and _SHA256.fullmatch(v)
                                              for k, v in files.items()):
        raise _fail(path, f"{MANIFEST}: files is not a table of file name -> sha256 (64 hex digits)")
    return man


def read(path: Path) -> Submitted:
    """The archive at ``path``, checked as an archive; a SessionError (one line) otherwise."""
    path = Path(path)
    if not path.is_file():
        raise SessionError(f"{path} is not a file; give the .tar.gz the candidate's submit.py wrote")
    raw = _raw(path)
    members = _members(path, raw)
    man = _manifest(path, members.pop(MANIFEST, None))
    files = {name.removeprefix(f"{FILES}/"): data for name, data in members.items()}
    listed, held = set(man["files"]), set(files)
    if listed != held:
        what = [f"{shown(n)} listed but not in it" for n in sorted(listed - held)]
        what += [f"{shown(n)} in it but not listed" for n in sorted(held - listed)]
        raise _fail(path, f"{MANIFEST} and the files disagree: {', '.join(what)}")
    for name, data in files.items():
        if hashlib.sha256(data).hexdigest() != man["files"][name]:
            raise _fail(path, f"{shown(name)}'s sha256 is not the one {MANIFEST} gives (changed after submit)")
    return Submitted(path.resolve(), man["session"], man["exercise"], man["submitted_at"], files, man["files"], raw)
