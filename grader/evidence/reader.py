"""The grader's side of ``harness.ckpt_reader``: a candidate's checkpoint read in a process of its
own, inside the sandbox, and handed back as plain data and tensors.

One reader process serves one run dir (its ``work/``, ``watched/`` and ``ranks/`` read-only, all it
can see), started the first time a check asks for a file of that run and ended when the grading
process exits (``close_all``). Where bubblewrap cannot run (a grading with ``--no-sandbox``, a
machine without user namespaces) the reader is still a process of its own with the same limits,
but unisolated. Each request is timed here: a reader that takes longer than ``TIMEOUT_S`` is ended
and the file is reported as not loading in time.

What comes back is untrusted too: its header is JSON read with a size cap, its tensors a
safetensors blob (no code in the format), and its tree is rebuilt here with the same caps the
reader applies.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from harness import ckpt_reader

TIMEOUT_S = 60.0  # one request (under the check's own 120 s); the exercises' checkpoints load in well under 1 s
HEADER_CAP = 64 * 2**20  # bytes of one answer's JSON line
SANDBOX_ENV = "TRAINWRECK_READER_SANDBOX"  # "0": never sandbox the reader (the kit's unit tests)


def _pipe(f: IO[bytes] | None) -> IO[bytes]:
    """One of the reader process's pipes: it is started with stdin and stdout piped, so both exist."""
    assert f is not None
    return f


class ReaderError(Exception):
    """The file could not be read; the message says why, as a phrase after "it"."""


def _run_dir_of(path: Path) -> Path:
    """The run dir a file belongs to (the folder above it holding run.json), else its folder."""
    p = Path(path).resolve()
    for d in [p.parent, *p.parents]:
        if (d / "run.json").is_file():
            return d
    return p.parent if p.is_file() or not p.exists() else p


class Reader:
    def __init__(self, root: Path, sandboxed: bool):
        self.root, self.sandboxed = root, sandboxed
        self.proc: subprocess.Popen[bytes] | None = None
        self.lock = threading.Lock()

    def _argv(self) -> tuple[list[str], dict[str, str]]:
        cmd = [str(Path(sys.executable).absolute()), "-m", "harness.ckpt_reader"]  # the venv's python, not its target
        from grader.exercises import kit_root

        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(kit_root()),
               "OMP_NUM_THREADS": "1", "LANG": "C.UTF-8"}
        if not self.sandboxed:
            return cmd, env
        from harness.limits import Limits
        from harness.sandbox import SandboxPolicy, build

        readable = [d for d in (self.root / "work", self.root / "watched", self.root / "ranks") if d.is_dir()]
        if not (self.root / "run.json").is_file():
            readable = [self.root]
        policy = SandboxPolicy(kit_root=kit_root(), readable=readable, writable=[],
                               limits=Limits(memory_mb=4096, processes=4, tasks=256), uid=os.geteuid())
        w = build(policy, cmd, env={"OMP_NUM_THREADS": "1"})
        return w.argv, w.env

    def _start(self) -> subprocess.Popen[bytes]:
        if self.proc is None or self.proc.poll() is not None:
            argv, env = self._argv()
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, env=env, start_new_session=True)
        return self.proc

    def close(self) -> None:
        p, self.proc = self.proc, None
        if p is None:
            return
        try:
            p.kill()
            p.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass
        for f in (p.stdin, p.stdout):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass

    def read(self, path: Path, kind: str = "file") -> Any:
        with self.lock:
            p = self._start()
            deadline = time.monotonic() + TIMEOUT_S
            try:
                stdin = _pipe(p.stdin)
                stdin.write(json.dumps({"path": str(path), "kind": kind}).encode() + b"\n")
                stdin.flush()
                header = json.loads(self._line(p, deadline))
                if not isinstance(header, dict):
                    raise ValueError("not an object")
                if not header.get("ok"):
                    raise ReaderError(str(header.get("error", "did not load"))[:400])
                n = int(header.get("bytes", 0))
                if not 0 <= n <= ckpt_reader.TOTAL_CAP:
                    raise ValueError(f"a blob of {n} bytes")
                blob = self._exactly(p, n, deadline)
            except ReaderError:
                raise
            except TimeoutError:
                self.close()
                raise ReaderError(f"did not load within {TIMEOUT_S:.0f} s") from None
            except (OSError, ValueError, RecursionError) as e:
                self.close()
                raise ReaderError(f"could not be read back from the reader process ({type(e).__name__}: "
                                  f"{str(e)[:120]})") from None
        return _rebuild(header.get("tree"), _tensors(blob))

    @staticmethod
    def _wait(p: subprocess.Popen[bytes], deadline: float) -> None:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([_pipe(p.stdout)], [], [], left)[0]:
            raise TimeoutError

    def _line(self, p: subprocess.Popen[bytes], deadline: float) -> bytes:
        """The header line; what came after its newline is the blob's start (``self._rest``)."""
        buf = bytearray()
        fd = _pipe(p.stdout).fileno()
        while b"\n" not in buf:
            if len(buf) > HEADER_CAP:
                raise ValueError(f"a header over {HEADER_CAP >> 20} MiB")
            self._wait(p, deadline)
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise ValueError("the reader process ended")
            buf += chunk
        i = buf.index(b"\n")
        self._rest = bytes(buf[i + 1:])
        return bytes(buf[:i])

    def _exactly(self, p: subprocess.Popen[bytes], n: int, deadline: float) -> bytes:
        buf = bytearray(getattr(self, "_rest", b""))
        self._rest = b""
        fd = _pipe(p.stdout).fileno()
        while len(buf) < n:
            self._wait(p, deadline)
            chunk = os.read(fd, min(1 << 20, n - len(buf)))
            if not chunk:
                raise ValueError("the reader process ended mid-answer")
            buf += chunk
        if len(buf) > n:
            raise ValueError("more bytes than the header said")
        return bytes(buf)


def _tensors(blob: bytes) -> dict[str, Any]:
    if not blob:
        return {}
    from safetensors.torch import load

    return load(blob)


def _rebuild(node: Any, tensors: dict[str, Any], depth: int = 0) -> Any:
    if depth > ckpt_reader.DEPTH_CAP + 2:
        raise ReaderError("came back nested too deeply")
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if isinstance(node, list):  # never produced by the reader: a list is {"l": ...}
        raise ReaderError("came back malformed")
    if not isinstance(node, dict) or len(node) not in (1, 2):
        raise ReaderError("came back malformed")
    if "t" in node:
        t = tensors.get(str(node["t"]))
        if t is None:
            raise ReaderError("came back naming a tensor it did not send")
        return t
    if "d" in node:
        return {(k if isinstance(k, (str, int, float, bool)) or k is None else str(k)): _rebuild(v, tensors, depth + 1)
                for k, v in node["d"]}
    if "l" in node:
        return [_rebuild(v, tensors, depth + 1) for v in node["l"]]
    if "u" in node:
        return tuple(_rebuild(v, tensors, depth + 1) for v in node["u"])
    if "f" in node:
        return float(str(node["f"])) if str(node["f"]) in ("nan", "inf", "-inf") else float("nan")
    if "x" in node:
        return b""
    if "o" in node:  # an object: what it holds (a module's or an optimizer's state dict), or a marker
        return _rebuild(node["v"], tensors, depth + 1) if "v" in node else Opaque(str(node["o"]))
    raise ReaderError("came back malformed")


class Opaque(str):
    """An object the reader could not describe by content: its class name."""


_readers: dict[tuple[Path, bool], Reader] = {}
_lock = threading.Lock()


_mode: bool | None = None  # set by the grading that judges (``isolated``); None: decide here


@contextmanager
def isolated(sandboxed: bool | None) -> Iterator[None]:
    """Readers started inside sandboxed (True) or not (False) as the grading whose runs they read
    was; None leaves it to ``_sandboxed``. Every reader started inside ends on leaving."""
    global _mode
    old, _mode = _mode, sandboxed
    try:
        yield
    finally:
        _mode = old
        close_all()


def _sandboxed() -> bool:
    if _mode is not None:
        return _mode
    if os.environ.get(SANDBOX_ENV) == "0":
        return False
    from harness.sandbox import probe

    return probe().ok


def read(path: Path, kind: str = "file") -> Any:
    """``path`` loaded as a resume loads it, in the reader process for its run dir."""
    sandboxed = _sandboxed()
    # sandboxed, a reader sees one run's folders only; unsandboxed, one reader serves every path
    root = _run_dir_of(path) if sandboxed else Path("/")
    with _lock:
        r = _readers.get((root, sandboxed))
        if r is None:
            r = _readers[(root, sandboxed)] = Reader(root, sandboxed)
    return r.read(Path(path).resolve(), kind)


def close_all() -> None:
    with _lock:
        readers = list(_readers.values())
        _readers.clear()
    for r in readers:
        r.close()


atexit.register(close_all)
