"""Reading files the grader does not trust, in one place: kit files a person may have broken (a
manifest, a rubric, a question bank) and files a candidate's run left behind (checkpoints, logs).

- A broken kit file is one line naming the file, the problem and the fix (never "internal error":
  not UTF-8, not TOML, a folder where a file belongs).
- A candidate's file is read only when it is a regular file (``lstat``: a FIFO named like a
  checkpoint would block ``open`` forever, a device would never end) inside the folder it belongs
  to (a symlink out of the work dir is not followed), and never past a size cap.
- The kit's answers (``solutions/``, and the hints in each ``exercise.toml``) are read without
  leaving a read time on them (``O_NOATIME``), so a read time on one is a read from outside the kit
  (``grader.sessions.tripwire``).
"""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path
from typing import Any

TOML_CAP = 4 * 2**20  # a manifest or rubric is kilobytes


def read_toml(path: Path, error: type[Exception], fix: str = "fix the syntax") -> dict[str, Any]:
    path = Path(path)
    try:
        if path.stat().st_size > TOML_CAP:
            raise error(f"{path}: {path.stat().st_size / 2**20:.0f} MiB is not a TOML file of the kit's; "
                        "give the right file")
        return tomllib.loads(read_quietly(path).decode("utf-8"))  # quietly: a manifest holds the hints
    except FileNotFoundError:
        raise error(f"{path}: not found; create it or give another path") from None
    except IsADirectoryError:
        raise error(f"{path}: is a folder, not a TOML file; give the file") from None
    except UnicodeDecodeError as e:
        raise error(f"{path}: not UTF-8 text (byte {e.start}); save it as UTF-8") from None
    except tomllib.TOMLDecodeError as e:
        raise error(f"{path}: not valid TOML ({e}); {fix}") from None


def read_quietly(path: Path) -> bytes:
    """The file's bytes, read without updating its access time where the system allows it: Linux's
    ``O_NOATIME``, for a file this user owns (another's file, or another system, is read plainly:
    the tripwire does not watch those)."""
    flags = os.O_RDONLY | getattr(os, "O_NOATIME", 0)
    try:
        fd = os.open(path, flags)
    except PermissionError:
        if flags == os.O_RDONLY:
            raise
        fd = os.open(path, os.O_RDONLY)  # EPERM: O_NOATIME on a file this user does not own
    with os.fdopen(fd, "rb") as f:
        return f.read()


def copy_quietly(src: Path, dst: Path) -> None:
    """``shutil.copy2`` of one file through ``read_quietly``: its bytes, mode and modification time."""
    import shutil

    Path(dst).write_bytes(read_quietly(src))
    shutil.copystat(src, dst)


def regular_file(path: Path, within: Path | None = None) -> bool:
    """A regular file (not a FIFO, socket, device or folder), and when ``within`` is given, one that
    resolves to a place inside that folder."""
    try:
        st = os.stat(path)  # follows a symlink: what an open() would reach
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode):
        return False
    if within is not None:
        real, root = os.path.realpath(path), os.path.realpath(within)
        return real == root or real.startswith(root + os.sep)
    return True


def why_not_readable(path: Path, within: Path | None = None, cap: int | None = None) -> str | None:
    """Why a candidate's file will not be read (None: it may be), in words for a check's message."""
    if not os.path.lexists(path):
        return "does not exist"
    if not regular_file(path):
        return "is not a regular file"
    if within is not None and not regular_file(path, within):
        return "leads outside the run's working folder"
    if cap is not None and os.stat(path).st_size > cap:
        return f"is {os.stat(path).st_size / 2**20:.0f} MiB, more than such a file can be"
    return None
