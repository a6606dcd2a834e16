"""The rank's side of the channel: records, logs and files leave the rank over a Unix socket the
parent owns, and the parent (``harness.channel_server``) signs and stores them in the run dir,
which the sandbox can neither see nor write. Nothing in the rank can sign: there is no key here.

Protocol (version 1). Every connection starts with one JSON line, the hello (at most 4 KiB):
``{"v": 1, "mode": M, "name": N, "size": S, "dropped": D, "pid": P}``, then by mode:

- ``records``: JSON lines ``{"s": stream, "r": record}``, one connection per process for every
  record stream (``events.jsonl``, ``samples.jsonl`` ...); ``dropped`` says how many records this
  process could not send on its earlier connection;
- ``bytes``: raw bytes appended to ``name`` (``stdout.log``, ``stderr.log``, ``stacks.txt``); the
  bootstrap puts such a socket on fds 1 and 2, so C++ output travels too;
- ``file``: exactly ``size`` raw bytes stored as ``name`` (``final_params.safetensors``); the parent answers
  ``ok`` or ``refused`` once it is stored.

The rank does not say which rank it is: the parent knows the peer's pid from the socket
(SO_PEERCRED) and which rank that pid is from outside (``harness.procwatch``).

A slow parent never blocks a rank for long: every socket has a send timeout, after which the record
is dropped and counted (and the count reported on the next connection), never raised into the
script's optimizer step.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

CHANNEL_ENV = "TRAINWRECK_CHANNEL"  # the socket's path as the rank sees it
MOUNT = "/run/trainwreck"  # where the parent's channel folder appears in the sandbox
SOCKET_NAME = "sock"
VERSION = 1
HELLO_MAX = 4096
SEND_TIMEOUT_S = 10.0
RETRY_AFTER_S = 1.0  # after a failed connect, drop records for this long before trying again


def socket_path() -> str | None:
    return os.environ.get(CHANNEL_ENV) or None


def active() -> bool:
    """Whether this process runs under a parent that receives its records over the channel."""
    return socket_path() is not None


def connect(mode: str, name: str = "", size: int = 0, dropped: int = 0,
            timeout_s: float | None = None) -> socket.socket:
    """A blocking socket to the parent, hello sent, with a kernel send timeout (``SO_SNDTIMEO``,
    not Python's timeout: that would make the socket non-blocking, and fds 1 and 2 with it)."""
    path = socket_path()
    if path is None:
        raise OSError(f"{CHANNEL_ENV} is not set: not running under a sandboxed launch")
    timeout_s = SEND_TIMEOUT_S if timeout_s is None else timeout_s
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sec = int(timeout_s)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO,
                     struct.pack("ll", sec, int((timeout_s - sec) * 1e6)))
        s.connect(path)
        hello = {"v": VERSION, "mode": mode, "name": name, "size": size, "dropped": dropped,
                 "pid": os.getpid()}
        s.sendall(json.dumps(hello).encode() + b"\n")
    except BaseException:
        s.close()
        raise
    return s


class _Sender:
    """This process's records connection: opened on first use, opened again after a fork (a
    DataLoader worker must not write into its parent's stream), safe across threads."""

    def __init__(self):
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._pid = os.getpid()
        self.dropped = 0
        self._retry_at = 0.0

    def _after_fork(self) -> None:
        self._lock = threading.Lock()  # a lock held by another thread at fork time stays held
        if self._sock is not None:
            # Our copy of the parent's connection: closing a copy (no shutdown) leaves the
            # parent's connection as it is.
            self._sock.close()
            self._sock = None
        self._pid = os.getpid()
        self.dropped = 0
        self._retry_at = 0.0

    def send(self, stream: str, record: dict[str, Any]) -> bool:
        return self.send_many(stream, [record])

    def send_many(self, stream: str, records: list[dict[str, Any]]) -> bool:
        """Send ``records`` in order with one ``sendall``. On failure every one of them counts as
        dropped: the parent may have part of the batch, never a record it did not get whole."""
        if not records:
            return True
        data = b"".join(json.dumps({"s": stream, "r": r}, separators=(",", ":")).encode() + b"\n"
                        for r in records)
        if os.getpid() != self._pid:
            self._after_fork()
        with self._lock:
            if self._sock is None:
                if time.monotonic() < self._retry_at:
                    self.dropped += len(records)
                    return False
                try:
                    self._sock = connect("records", dropped=self.dropped)
                    self.dropped = 0
                except OSError:
                    self._retry_at = time.monotonic() + RETRY_AFTER_S
                    self.dropped += len(records)
                    return False
            try:
                self._sock.sendall(data)
                return True
            except OSError:  # timed out (the parent is stuck) or refused: part of a line may be gone
                self._sock.close()
                self._sock = None
                self._retry_at = time.monotonic() + RETRY_AFTER_S
                self.dropped += len(records)
                return False

    def close(self) -> None:
        with self._lock:
            if self._sock is not None and os.getpid() == self._pid:
                self._sock.close()
            self._sock = None


_sender = _Sender()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_sender._after_fork)


class RecordWriter:
    """Drop-in for ``harness.rundir.RecordWriter``: ``write(record)`` sends the record to the
    parent, which signs it and appends it to ``ranks/<rank>/<path's file name>``. The key is
    accepted and ignored, so a caller switches by changing the class only."""

    def __init__(self, path: Path | str, key: str = ""):
        self.stream = Path(path).name

    def write(self, record: dict[str, Any]) -> None:
        _sender.send(self.stream, record)

    def write_many(self, records: list[dict[str, Any]]) -> None:
        """Send ``records`` in order, many lines in one write (the buffered collective trace)."""
        _sender.send_many(self.stream, records)

    def close(self) -> None:
        """The connection is the process's, shared by every writer; it closes at exit."""


def open_writer(path: Path | str, key: str):
    """The record writer for this process: over the channel under a sandboxed launch, else the
    run dir's file writer. What instrument, saves and profiler call instead of
    ``rundir.RecordWriter`` (docs/sandbox.md, "Wiring")."""
    if active():
        return RecordWriter(path, key)
    from harness import rundir

    return rundir.RecordWriter(Path(path), key)


def dropped() -> int:
    """Records this process could not send on its current connection (0 when all went)."""
    return _sender.dropped


def redirect_output(header: bytes = b"") -> None:
    """Put byte streams to the parent on fds 1 and 2 (``stdout.log``, ``stderr.log``), each
    starting with ``header``; output written by C++ (gloo, NCCL) travels the same way."""
    for fd, name in ((1, "stdout.log"), (2, "stderr.log")):
        s = connect("bytes", name)
        if header:
            s.sendall(header)
        os.dup2(s.fileno(), fd)
        s.close()  # fd 1 or 2 keeps the connection


def open_stream(name: str):
    """A binary, unbuffered file on a byte stream (``stacks.txt`` for faulthandler)."""
    s = connect("bytes", name)
    return os.fdopen(s.detach(), "wb", buffering=0)


def send_file(name: str, data: bytes, timeout_s: float = 60.0) -> str:
    """Send ``data`` to be stored as ``name`` in the rank's dir; returns its sha256 once the
    parent says it is stored. Raises OSError when it was refused (too large) or did not arrive."""
    s = connect("file", name, size=len(data))
    try:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
        s.settimeout(timeout_s)
        answer = b""
        while not answer.endswith(b"\n") and len(answer) < 64:
            chunk = s.recv(64)
            if not chunk:
                break
            answer += chunk
    finally:
        s.close()
    if answer.strip() != b"ok":
        raise OSError(f"the parent did not store {name} ({answer.strip().decode(errors='replace') or 'no answer'})")
    return hashlib.sha256(data).hexdigest()


SETTINGS_MAX = 1 << 16


def fetch_settings(timeout_s: float = 30.0) -> dict[str, str]:
    """The run's settings (faults, fingerprints, the grading's own), from the parent: in a sandboxed
    run they are in no environment block a process of the run could read (the launcher's
    included), only here. Raises OSError when the parent does not answer."""
    s = connect("settings")
    try:
        s.shutdown(socket.SHUT_WR)
        s.settimeout(timeout_s)
        answer = b""
        while not answer.endswith(b"\n") and len(answer) <= SETTINGS_MAX:
            chunk = s.recv(1 << 14)
            if not chunk:
                break
            answer += chunk
    finally:
        s.close()
    try:
        got = json.loads(answer)
    except ValueError:
        got = None
    if not isinstance(got, dict):
        raise OSError(f"the parent sent no settings ({answer[:80].decode(errors='replace') or 'no answer'})")
    return {str(k): str(v) for k, v in got.items()}
