"""Sealing a run dir once it is written: ``seal.json``, a manifest of every file in it (its sha256
and size; a symlink's target; the kind of anything else), with an HMAC under a key kept in the kit's
``.trainwreck/`` folder, which no sandboxed run can see. ``verify`` tells whether the run dir is as
it was sealed: a file added, removed or changed after the parent wrote it (a stray process that
outlived an unsandboxed run, a submission that poisoned the reference cache, a hand edit) is found
before anything is judged from it.

The grader seals each run as soon as ``harness.launch`` returns (the run's processes are gone and
the work dir has been cleared of traps), and the reference cache's entries with them; ``regrade``
and a cache hit verify. A run dir sealed on another machine (another key) does not verify either:
grade it again there.

Everything is read with ``lstat`` first and only regular files are opened, so a FIFO left by an
unsandboxed run cannot block the walk.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.rundir import atomic_write_json, sha256_file

SEAL = "seal.json"
KEY_FILE = "seal.key"
FORMAT = 1
MAX_PROBLEMS = 5  # named in a message; the count says how many more


def kit_key(kit: Path | None = None) -> bytes:
    """The machine's sealing key (32 random bytes, hex, mode 0600), made on first use, in the kit's
    ``.trainwreck/`` folder: beside the reference cache, and like it never visible in a sandbox."""
    from grader.exercises import kit_root

    folder = (kit or kit_root()) / ".trainwreck"
    path = folder / KEY_FILE
    try:
        return bytes.fromhex(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        pass
    folder.mkdir(parents=True, exist_ok=True)
    key = os.urandom(32)
    tmp = folder / f".{KEY_FILE}.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key.hex())
    try:
        os.link(tmp, path)  # never replaces a key another grading made meanwhile
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    return bytes.fromhex(path.read_text().strip())


def inventory(run_dir: Path) -> dict[str, dict[str, Any]]:
    """Every entry under ``run_dir`` but the seal: ``{relative path: {"sha256", "bytes"} | {"link"}
    | {"kind"}}``. Folders are implied by their files."""
    root = Path(run_dir)
    out: dict[str, dict[str, Any]] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        for name in sorted(filenames) + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            path = Path(dirpath) / name
            rel = str(path.relative_to(root))
            if rel == SEAL:
                continue
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                out[rel] = {"sha256": sha256_file(path), "bytes": st.st_size}
            elif stat.S_ISLNK(st.st_mode):
                out[rel] = {"link": os.readlink(path)}
            else:
                out[rel] = {"kind": stat.S_IFMT(st.st_mode)}
    return out


def _mac(files: dict[str, Any], key: bytes) -> str:
    body = json.dumps({"format": FORMAT, "files": files}, sort_keys=True, separators=(",", ":")).encode()
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def seal(run_dir: Path, key: bytes | None = None) -> dict[str, Any]:
    """Write ``seal.json`` for the run dir as it is now; returns what it holds."""
    files = inventory(run_dir)
    sealed = {"format": FORMAT, "files": files, "mac": _mac(files, key or kit_key())}
    atomic_write_json(Path(run_dir) / SEAL, sealed)
    return sealed


@dataclass(frozen=True)
class Check:
    ok: bool
    problems: list[str]

    @property
    def message(self) -> str:
        more = len(self.problems) - MAX_PROBLEMS
        return "; ".join(self.problems[:MAX_PROBLEMS]) + (f" and {more} more" if more > 0 else "")


def verify(run_dir: Path, key: bytes | None = None) -> Check:
    """Whether the run dir is exactly as sealed. Problems name each file added, removed or changed."""
    path = Path(run_dir) / SEAL
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode) or os.lstat(path).st_size > 64 << 20:
            return Check(False, [f"{SEAL} is not a file the grader wrote"])
        sealed = json.loads(path.read_text(encoding="utf-8"))
        files, mac = sealed["files"], str(sealed["mac"])
        if not isinstance(files, dict):
            raise TypeError("files")
    except FileNotFoundError:
        return Check(False, [f"no {SEAL}: the run dir was never sealed, or the seal was removed"])
    except (OSError, ValueError, KeyError, TypeError):
        return Check(False, [f"{SEAL} does not read as a seal"])
    if not hmac.compare_digest(_mac(files, key or kit_key()), mac):
        return Check(False, [f"{SEAL} was not written with this kit's key (edited, or sealed on another machine)"])
    now = inventory(run_dir)
    problems = [f"{p} was added" for p in sorted(set(now) - set(files))]
    problems += [f"{p} was removed" for p in sorted(set(files) - set(now))]
    problems += [f"{p} was changed" for p in sorted(set(now) & set(files)) if now[p] != files[p]]
    return Check(not problems, problems)
