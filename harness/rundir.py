"""The run dir: where every observation of a launch lands, and how it is read back.

Layout (documented for users in docs/run-dir.md)::

    <run_dir>/
      run.json                  written by the parent at the end: config, status, per-rank exits, key
      launcher.log              the elastic launcher's own stdout/stderr
      hang.json, hang.txt       only when the watchdog fired
      ranks/<rank>/
        stdout.log, stderr.log  the rank's output, every attempt, with an attempt header
        events.jsonl            start / pg_init / step / exit records (signed)
        collectives.jsonl       Python-level collective trace (signed)
        samples.jsonl           the sample ledger written by the kit's datasets (signed)
        loads.jsonl             what every DataLoader fetched, any dataset (signed; harness.fetches)
        saves.jsonl             torch.save / os.replace / shutil.copyfile calls of the script (signed)
        stacks.txt              faulthandler dumps, on request
        final_params.safetensors  optimizer parameters at exit (its sha256 is in the signed exit event)

Every JSON line written by a rank carries ``mac``: an HMAC of the record under a per-run key. In
an unisolated run the parent hands it to the rank bootstrap in its environment and the bootstrap
execs itself without it before the user's script runs (harness.bootstrap); sandboxed, no rank
holds it and the parent signs what arrives over the channel. The key is written to run.json only
after every rank has exited. A line the script wrote itself (or edited) fails verification and is
reported, never counted.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RUN_SCHEMA_VERSION = 1
KEY_ENV = "TRAINWRECK_KEY"
RUN_DIR_ENV = "TRAINWRECK_RUN_DIR"
PROFILE_ENV = "TRAINWRECK_PROFILE"  # only under `trainwreck run --profile` (harness.phases)
# "1" in every run a grading makes (grader.roles.GRADING_ENV): the work behind each step
# (harness.work) and the memory counts (harness.memstats), which only the grader's checks read.
# A plain `trainwreck run` goes without them: they are most of the step hook's cost.
GRADING_EVIDENCE_ENV = "TRAINWRECK_GRADING_EVIDENCE"
PG_TIMEOUT_ENV = "TRAINWRECK_PG_TIMEOUT"  # only when the launch asks for a process-group timeout
MMAP_THRESHOLD_ENV = "TRAINWRECK_MMAP_THRESHOLD"  # bytes: glibc's, fixed by the bootstrap (grader.roles says why)
THREADS_ENV = "TRAINWRECK_THREADS"  # intra-op threads per rank, set by the bootstrap (grader.roles)
SHOW_PREFIX = "TRAINWRECK_SHOW_"  # TRAINWRECK_SHOW_<NAME>=v: the script sees <NAME>=v (grader.roles)
# The harness's variables every process of a launch keeps: the process tree's marker (its path a
# random token in a grading), the channel's socket (one fixed path) and an exercise's artifact store.
# Every other TRAINWRECK_* is a setting of the run (its faults, fingerprints, the grading's
# evidence...), for the rank's bootstrap only, never for the script (harness.bootstrap).
VISIBLE_ENV = frozenset({RUN_DIR_ENV, "TRAINWRECK_CHANNEL", "TRAINWRECK_STORE", "TRAINWRECK_STORE_ROOT"})


def is_setting(name: str) -> bool:
    return name.startswith("TRAINWRECK_") and name not in VISIBLE_ENV

EVENTS = "events.jsonl"
COLLECTIVES = "collectives.jsonl"
SAMPLES = "samples.jsonl"
LOADS = "loads.jsonl"  # what each DataLoader fetched, seen at torch's fetcher (harness.fetches)
SAVES = "saves.jsonl"
STACKS = "stacks.txt"
STDOUT = "stdout.log"
STDERR = "stderr.log"
# safetensors, not a pickle: the file is written inside the candidate's process, so the grader
# reads it in a format that holds no code (``save_params`` / ``load_params``)
FINAL_PARAMS = "final_params.safetensors"


def save_params(state: dict[str, Any], path: Path) -> None:
    """Named tensors to ``path`` (atomically), keeping their order (the optimizer's) in the header."""
    from safetensors.torch import save_file

    tmp = Path(path).with_suffix(".tmp")
    save_file({k: v.contiguous() for k, v in state.items()}, str(tmp), metadata={"order": json.dumps(list(state))})
    os.replace(tmp, path)


def load_params(path: Path) -> dict[str, Any]:
    """What ``save_params`` wrote, in its order. Raises ValueError when it is not such a file."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            names = list(f.keys())
            order = json.loads((f.metadata() or {}).get("order", "[]"))
            if sorted(order) != sorted(names):
                order = names
            return {k: f.get_tensor(k) for k in order}
    except Exception as e:  # safetensors raises its own error types for a malformed header
        raise ValueError(f"{Path(path).name} is not a safetensors file: {type(e).__name__}") from None


def rank_dir(run_dir: Path | str, rank: int) -> Path:
    return Path(run_dir) / "ranks" / str(rank)


def new_key() -> str:
    return os.urandom(16).hex()


# json.dumps(record, sort_keys=True, separators=(",", ":")), without building an encoder per call.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


def _canonical(record: dict[str, Any]) -> bytes:
    return _CANONICAL.encode(record).encode()


_HMAC_BASES: dict[str, Any] = {}  # per key, an HMAC with the key already absorbed (copied per record)


def _mac(key: str, body: bytes) -> str:
    base = _HMAC_BASES.get(key)
    if base is None:
        base = _HMAC_BASES[key] = hmac.new(key.encode(), digestmod=hashlib.sha256)
    h = base.copy()
    h.update(body)
    return h.hexdigest()[:32]


def mac_of(record: dict[str, Any], key: str) -> str:
    return _mac(key, _canonical(record))


def verified(line: bytes | str, key: str) -> dict[str, Any] | None:
    """The record on ``line`` (without its mac) when it parses and its MAC verifies, else None."""
    try:
        rec = json.loads(line)
    except ValueError:
        return None
    if not isinstance(rec, dict) or "mac" not in rec:
        return None
    mac = rec.pop("mac")
    return rec if hmac.compare_digest(mac_of(rec, key), str(mac)) else None


def sign(record: dict[str, Any], key: str) -> str:
    """One JSON line: the record plus its MAC (appended to the canonical form, so the record is
    serialised once: this runs twice per collective in every rank)."""
    body = _canonical(record)
    mac = _mac(key, body)
    return (body[:-1].decode() + ("," if len(body) > 2 else "") + f'"mac":"{mac}"}}') if "mac" not in record \
        else json.dumps({**record, "mac": mac}, sort_keys=True, separators=(",", ":"))


class RecordWriter:
    """Append-only writer of signed records: each line is in the file (one ``write`` system call on
    an ``O_APPEND`` descriptor) once ``write`` returns, so a rank killed mid-run leaves its record up
    to the kill. No text layer in between: the step record is written at every optimizer step."""

    def __init__(self, path: Path, key: str):
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
        self._key = key
        self._lock = threading.Lock()  # a script's background threads (savers, uploads) write too

    def _append(self, data: bytes) -> None:
        if self._fd is None:
            raise ValueError("write to a closed record writer")
        while data:  # a regular file takes it whole; a short write (a full disk) raises or loops
            data = data[os.write(self._fd, data):]

    def write(self, record: dict[str, Any]) -> None:
        line = (sign(record, self._key) + "\n").encode()
        with self._lock:
            self._append(line)

    def write_many(self, records: list[dict[str, Any]]) -> None:
        """Append ``records`` in order with one write: a buffered writer (the collective trace)
        pays one system call per batch instead of one per record."""
        if not records:
            return
        text = "".join(sign(r, self._key) + "\n" for r in records).encode()
        with self._lock:
            self._append(text)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


@dataclass
class Records:
    valid: list[dict[str, Any]] = field(default_factory=list)
    forged: int = 0  # lines that are not records we signed (bad MAC, not JSON, truncated)


def read_records(path: Path, key: str | None) -> Records:
    """Verified records of one file. A line that is not JSON counts as forged unless a kill can
    explain it: the file's last line, or the last line of an attempt (the next record belongs to a
    later attempt, so the rank was killed mid-write and restarted)."""
    out = Records()
    if not path.exists():
        return out
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    torn = 0  # unparsable lines since the last record, not yet judged
    last_attempt = None
    for line in lines:
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            torn += 1
            continue
        if not isinstance(rec, dict) or "mac" not in rec:
            out.forged += 1
            continue
        mac = rec.pop("mac")
        if key is not None:
            if not hmac.compare_digest(mac_of(rec, key), str(mac)):
                out.forged += 1
                continue
        attempt = _attempt(rec)
        if torn:
            restarted = attempt is not None and last_attempt is not None and attempt > last_attempt
            out.forged += torn - 1 if restarted else torn  # at most one torn line per kill
            torn = 0
        last_attempt = attempt if attempt is not None else last_attempt
        out.valid.append(rec)
    out.forged += max(torn - 1, 0)  # the file's last line may be cut short
    return out


def _attempt(rec: dict[str, Any]) -> int | None:
    a = rec.get("attempt", rec.get("a"))
    return a if isinstance(a, int) else None


def iter_new_lines(path: Path, offset: int) -> tuple[list[dict[str, Any]], int]:
    """Unverified records appended since ``offset`` (for live progress only, never grading)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            chunk = f.read()
    except FileNotFoundError:
        return [], offset
    end = chunk.rfind(b"\n")
    if end < 0:
        return [], offset
    recs = []
    for line in chunk[: end + 1].splitlines():
        try:
            recs.append(json.loads(line))
        except ValueError:
            continue
    return recs, offset + end + 1


def atomic_write_text(path: Path, text: str) -> None:
    """Write via a temporary file in the same dir and rename: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def load_run(run_dir: Path | str) -> dict[str, Any]:
    path = Path(run_dir) / "run.json"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no run.json; the run did not finish writing its record")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def ranks_in(run_dir: Path | str) -> Iterator[int]:
    root = Path(run_dir) / "ranks"
    if root.exists():
        yield from sorted(int(p.name) for p in root.iterdir() if p.name.isdigit())
