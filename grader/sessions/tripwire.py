"""Reads of the answers from outside the kit: a ``cat``, an editor or a copy of ``solutions/`` or
of a manifest (``exercises/<slug>/exercise.toml`` holds the hints) while a session is open, which
the kit's own commands (``grader.sessions.reveals``) never see.

The file system keeps each file's last read time (``atime``). Under ``relatime``, Linux's default,
it is updated by the first read after the file's last change or last metadata change, and not by
later reads for a day. So when a session opens, every answer file is *armed*: its read time set to
its modification time (which changes its ctime too), and both recorded. A read from outside the
kit then moves the read time to the moment of the read; the kit reads answers with ``O_NOATIME``
(``grader.files.read_quietly``) and moves nothing. Each sweep (``session show``, the debrief,
``session close``) compares, appends what moved to a ledger, and arms again:

- read time moved: *read outside the kit at T* (T to the jiffy, the first read since the last sweep);
- change time moved with no read time, or the file written or replaced: *its times or contents
  were set* (``touch -a`` to hide a read moves the change time, which no user can set back).

A session's view shows the ledger's entries for its exercises inside its open time, as reveals.
What a reader is, the file system does not say: a shell, an editor, ``git status`` rehashing a file
whose change time moved, the test suite. The debrief says "read outside the kit", not "by the
candidate". Where reads cannot be seen (no ``O_NOATIME``, a ``noatime`` mount, answers another user
owns: then the candidate's user can be kept from reading them, docs/remote.md), ``unwatched`` says
why and the views print it. A same-user candidate who knows this can edit the ledger; the closure
that holds against that is the separate user of docs/remote.md.

State lives in the interviewer's trainwreck home (``$TRAINWRECK_HOME/answers/``), beside the session
database: ``armed.json`` (per file: inode, read and change time in ns), ``reads.jsonl`` and
``arms.jsonl`` (per session opened: whether its answers were armed, or why not).
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from grader.sessions.models import Reveal, Session, parse_time

ARMED = "armed.json"
READS = "reads.jsonl"
ARMS = "arms.jsonl"  # per session opened: armed, or why not
PROBE = "atime-probe"
MANIFEST = "exercise.toml"


@dataclass(frozen=True)
class Read:
    path: str  # relative to the kit: solutions/<slug>/<file>
    slug: str
    at: str  # ISO 8601, UTC, from the file's read time (or change time, for "set")
    kind: str  # read | set

    def outcome(self) -> str:
        return "read outside the kit" if self.kind == "read" else "its times or contents set outside the kit"


def _state(home: Path | None) -> Path:
    from harness.defaults import user_home

    return Path(home or user_home()) / "answers"


def _kit(kit: Path | None) -> Path:
    from grader.exercises import kit_root

    return Path(kit or kit_root()).resolve()


def answer_files(kit: Path) -> dict[Path, str]:
    """Every regular file under ``solutions/<slug>/`` (the reference code and its notes) and every
    ``exercises/<slug>/exercise.toml`` (the hints, the thresholds), with its slug."""
    out: dict[Path, str] = {}
    root = kit / "solutions"
    if not root.is_dir():
        return out
    for slug_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        for p in sorted(slug_dir.rglob("*")):
            if "__pycache__" not in p.parts and stat.S_ISREG(p.lstat().st_mode):
                out[p] = slug_dir.name
    for manifest in sorted((kit / "exercises").glob(f"*/{MANIFEST}")):
        if stat.S_ISREG(manifest.lstat().st_mode):
            out[manifest] = manifest.parent.name
    return out


def unwatched(kit: Path | None = None, home: Path | None = None) -> str:
    """Why reads of the answers cannot be seen here; "" when they can."""
    kit = _kit(kit)
    if not hasattr(os, "O_NOATIME"):
        return "this system has no O_NOATIME, so the kit's own reads could not be told from others'"
    files = answer_files(kit)
    if not files:
        return f"the kit at {kit} has no solutions/ folder"
    others = [p for p in files if os.geteuid() not in (0, p.lstat().st_uid)]  # O_NOATIME: the owner (or root)
    if others:
        return (f"{others[0].relative_to(kit)} belongs to uid {others[0].lstat().st_uid}, not this user: "
                "keep the candidate's user from reading the install instead (docs/remote.md)")
    try:
        records = _records_reads(_state(home))
    except OSError as e:
        return f"the read-time probe in {_state(home)} failed ({e.strerror or e})"
    if not records:
        return "this file system does not record read times (mounted noatime)"
    return ""


def _records_reads(state: Path) -> bool:
    """Whether a plain read moves a file's read time here (a probe in the state folder, which lies
    on the same machine; a ``noatime`` mount of the kit alone would be missed, and is rare)."""
    state.mkdir(parents=True, exist_ok=True)
    probe = state / PROBE
    probe.write_bytes(b"probe\n")
    st = probe.stat()
    os.utime(probe, ns=(st.st_mtime_ns - 1_000_000_000, st.st_mtime_ns))
    with open(probe, "rb") as f:
        f.read()
    return probe.stat().st_atime_ns != st.st_mtime_ns - 1_000_000_000


def _arm_one(p: Path) -> list[int]:
    st = p.stat()
    # read time = modification time: the next read moves it. A file armed already is left alone:
    # setting its times again would move its change time, which another home watching the same
    # kit (a second interviewer's, a test's beside it) would record as set outside the kit.
    if st.st_atime_ns != st.st_mtime_ns:
        os.utime(p, ns=(st.st_mtime_ns, st.st_mtime_ns))
        st = p.stat()
    return [st.st_ino, st.st_atime_ns, st.st_ctime_ns]


def _save(state: Path, armed: dict[str, list[int]]) -> None:
    from harness.rundir import atomic_write_json

    atomic_write_json(state / ARMED, armed)


def _load(state: Path) -> dict[str, list[int]]:
    try:
        data = json.loads((state / ARMED).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _iso(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, UTC).isoformat(timespec="milliseconds")


def sweep(kit: Path | None = None, home: Path | None = None) -> list[Read]:
    """Record (in the ledger) every armed answer file read or set since it was armed, and arm it
    again; returns what was recorded. Nothing is done where reads cannot be seen."""
    try:
        return _sweep(_kit(kit), home)
    except OSError:  # a kit or home that cannot be written now: the next sweep still sees the read
        return []


def _sweep(kit: Path, home: Path | None) -> list[Read]:
    state = _state(home)
    armed = _load(state)
    if not armed or unwatched(kit, home):
        return []
    files = answer_files(kit)
    found: list[Read] = []
    for p, slug in files.items():
        rel = str(p.relative_to(kit))
        was = armed.get(rel)
        st = p.stat()
        if was is None:  # added since arming: armed from now on
            armed[rel] = _arm_one(p)
            continue
        if st.st_ino != was[0] or st.st_mtime_ns != was[1]:  # replaced or written (armed: read time = mtime)
            found.append(Read(rel, slug, _iso(st.st_ctime_ns), "set"))
        elif st.st_atime_ns != was[1]:
            found.append(Read(rel, slug, _iso(st.st_atime_ns), "read"))
        elif st.st_ctime_ns != was[2]:
            found.append(Read(rel, slug, _iso(st.st_ctime_ns), "set"))
        else:
            continue
        armed[rel] = _arm_one(p)
    if found:
        with open(state / READS, "a", encoding="utf-8") as f:
            for r in found:
                f.write(json.dumps(asdict(r)) + "\n")
    _save(state, armed)
    return found


def arm(session_id: str, kit: Path | None = None, home: Path | None = None) -> str:
    """Arm every answer file for the session just opened (after a sweep, so nothing read before is
    lost), and note whether it could be; returns ``unwatched``'s reason ("" when armed)."""
    kit, state = _kit(kit), _state(home)
    try:
        why = unwatched(kit, home)
        if not why:
            sweep(kit, home)
            _save(state, {str(p.relative_to(kit)): _arm_one(p) for p in answer_files(kit)})
    except OSError as e:  # a read-only install, a full disk: said, and the session opens all the same
        why = f"the answers could not be armed ({e.strerror or e})"
    try:
        state.mkdir(parents=True, exist_ok=True)
        with open(state / ARMS, "a", encoding="utf-8") as f:
            f.write(json.dumps({"session": session_id, "kit": str(kit), "why": why}) + "\n")
    except OSError:
        pass  # not noted: the session's view says it was not armed, which is then the truth
    return why


def watched(session_id: str, home: Path | None = None) -> str:
    """"" when the session's answers were armed when it opened; else why not, in words."""
    try:
        lines = (_state(home) / ARMS).read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = []
    for line in reversed(lines):
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and row.get("session") == session_id:
            return str(row.get("why", ""))
    return "not armed when it opened (opened from another trainwreck home, or by an older kit)"


def ledger(home: Path | None = None) -> list[Read]:
    try:
        lines = (_state(home) / READS).read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            out.append(Read(**json.loads(line)))
        except (ValueError, TypeError):
            continue  # a torn last line: the next sweep appends after it
    return out


def reveals(session: Session, slugs: list[str], kit: Path | None = None, home: Path | None = None,
            clock: Callable[[], datetime] = lambda: datetime.now(UTC)) -> list[Reveal]:
    """The ledger's reads of ``slugs``' answers while ``session`` was open, as reveals (what: the
    file, outcome: read or set outside the kit, place: the kit)."""
    kit = _kit(kit)
    start = parse_time(session.started_at)
    end = parse_time(session.closed_at) if session.closed_at else clock()
    out = []
    for r in ledger(home):
        if r.slug in slugs and start <= parse_time(r.at) <= end:
            out.append(Reveal(session.id, r.slug, r.at, r.path, r.outcome(), str(kit)))
    return out
