"""What the script does that a training fix has no reason to, seen at run time (a CPython audit
hook), not from its spelling.

The static scan (``grader.scan``) reads the submission's text: ``getattr`` with a computed name,
``exec`` of a decoded string or ``importlib`` reach past it. An audit hook, added by the bootstrap
before the script runs, sees the operations themselves, and cannot be removed once added (CPython
offers no way). It reports, once each, as ``audit`` events over the rank's records:

- ``kit``: a file of the kit opened (its harness, grader, exercises or solutions), or a module of it
  imported that an exercise script has no use for (all but ``harness.workloads``), by an ``import``
  statement or by the import system reading its file (``importlib.import_module`` raises no
  ``import`` event); a module the bootstrap already loaded is neither imported nor read again, and
  is not seen;
- ``proc``: ``/proc`` read beyond this process's own counters (another process's files, any
  process's ``environ``, ``cmdline`` or ``mem``);
- ``outside``: a file opened for writing outside the working directory and the temporary folders;
- ``ctypes``: a shared library loaded, or a symbol looked up, through ``ctypes``;
- ``spawn``: a program started (``subprocess``, ``os.exec*``, ``os.system``, ``os.posix_spawn``);
- ``exec``: code made at run time and run: ``exec``, ``eval`` or ``compile`` of a string, or ``exec``
  of a code object, called by the script's own line (a decoded payload, a computed program); the
  text of a ``.py`` file of the script's own folder is not (nanoGPT's ``exec(open("configurator.py")
  .read())``). Only the script's direct call counts: the standard library generating code for it (``dataclasses``,
  ``namedtuple``) and torch compiling its graphs are their own callers, and the import system's
  compiling of a module is an import.

Only what the script itself caused counts: a frame of the submission's files (the script's folder)
or of the working directory must be on the call's stack, with no frame of the kit's inside it (the
harness's own work is not reported, even when a step of the script led to it; its wrappers around
the script's own calls, ``open`` and ``torch.save`` traced by ``rawwrites`` and ``saves``, are seen
through); a library loaded or
a program started must be the script's own call (standard library frames aside), so torch starting
its compiler is not reported.
What is reported is for the interviewer (``grader.flags``); no verdict rests on it.
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

MAX_EVENTS = 40  # per process: the first ones, each (kind, what) once
OWN_FILE_CAP = 1 << 20  # a file of the script's folder read to know its text when exec'd: a script, not data
WATCHED = frozenset({"open", "import", "ctypes.dlopen", "ctypes.dlsym", "subprocess.Popen", "os.exec", "os.system",
                     "os.posix_spawn", "os.spawn", "exec", "compile"})
_STDLIB = os.path.dirname(os.__file__) + os.sep
KIT_PACKAGES = ("harness", "grader")
ALLOWED_IMPORTS = frozenset({"harness.workloads"})  # what an exercise script may import of the kit
TRANSPARENT = ("rawwrites.py", "saves.py")  # harness modules that only trace what the script asked for
_OWN_PROC = ("stat", "statm", "status", "fd", "task", "maps", "smaps", "smaps_rollup", "limits",
             "cgroup", "mountinfo", "mounts", "meminfo", "cpuinfo", "loadavg", "sys", "uptime")


class Auditor:
    """The hook's state. ``send(kind, what, where)`` delivers one report."""

    def __init__(self, send: Callable[[str, str, str], None], mine: list[str], work_dir: str, kit_root: str,
                 temp: tuple[str, ...] = ("/tmp", "/dev/shm", "/dev/null")):
        self.send = send
        self.mine = tuple(os.path.realpath(p).rstrip(os.sep) + os.sep for p in mine)
        self.work = os.path.realpath(work_dir).rstrip(os.sep) + os.sep
        self.kit_root = os.path.realpath(kit_root)
        self.kit = tuple(os.path.join(self.kit_root, d) + os.sep
                         for d in ("harness", "grader", "exercises", "solutions"))
        self.temp = temp
        here = os.path.dirname(os.path.realpath(__file__))
        # the kit's wrappers around the script's own calls (open, torch.save, renames): see through them
        self.transparent = tuple(os.path.join(here, f) for f in TRANSPARENT)
        self.seen: set[tuple[str, str]] = set()
        self._busy = threading.local()
        self._own = False  # the last compile was of a file of the script's own folder
        self._own_hashes: set[str] | None = None  # sha256 of the folder's .py files, read on first need

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if event not in WATCHED or getattr(self._busy, "on", False) or len(self.seen) >= MAX_EVENTS:
            return
        self._busy.on = True
        try:
            if event in ("exec", "compile"):
                self._generated(event, args)
                return
            found = self._classify(event, args)
            if found is None:
                return
            # the import system reading a kit module's file: an import, even where no ``import`` event
            # came (importlib.import_module raises none), named as the import event would name it
            loading = event == "open" and found[0] == "kit" and sys._getframe(1).f_code.co_filename.startswith(
                "<frozen importlib")
            if loading:
                module = self._module(found[1])
                if module is None or module in ALLOWED_IMPORTS or module in KIT_PACKAGES:
                    return
                found = ("kit", f"import {module}")
            where = self._culprit(direct=found[0] in ("ctypes", "spawn"), importing=event == "import" or loading)
            if where is None or found in self.seen:
                return
            self.seen.add(found)
            self.send(found[0], found[1], where)
        except Exception:  # never let the audit break the script
            pass
        finally:
            self._busy.on = False

    def _generated(self, event: str, args: tuple[Any, ...]) -> None:
        """``exec``/``eval``/``compile`` called by a line of the script itself (the frame that called
        the builtin is the script's): reported once per kind of call."""
        caller = sys._getframe(2)  # 0: here, 1: hook, 2: the Python frame that called the builtin
        fn = caller.f_code.co_filename
        if not (fn.startswith(self.mine) or fn.startswith(self.work)):
            return
        if event == "compile":
            source, name = (tuple(args) + (None, None))[:2]
            # nanoGPT's `exec(open("configurator.py").read())`: a file of the script's own folder, run
            self._own = self._own_file(source)
            if self._own:
                return
        else:
            name = getattr(args[0] if args else None, "co_filename", "?")
            if self._own:  # the exec that follows the compile of the script's own file
                self._own = False
                return
        # compile then exec of the same program (exec of a string does both) is one report, by its name
        found = ("exec", f"code named {str(name)[:80]!r}")
        if found not in self.seen:
            self.seen.add(found)
            self.send(*found, f"{os.path.basename(fn)}:{caller.f_lineno}")

    def _own_file(self, source: Any) -> bool:
        """Whether ``source`` is the text of a Python file in the submission's folder."""
        if isinstance(source, str):
            source = source.encode("utf-8", "surrogatepass")
        if not isinstance(source, bytes):
            return False
        if self._own_hashes is None:
            self._own_hashes = set()
            for d in self.mine:
                try:
                    names = os.listdir(d)
                except OSError:
                    continue
                for n in names:
                    path = os.path.join(d, n)
                    if n.endswith(".py") and os.path.isfile(path) and os.path.getsize(path) < OWN_FILE_CAP:
                        with open(path, "rb") as f:
                            self._own_hashes.add(hashlib.sha256(f.read()).hexdigest())
        return hashlib.sha256(source).hexdigest() in self._own_hashes

    def _classify(self, event: str, args: tuple[Any, ...]) -> tuple[str, str] | None:
        if event == "open":
            path, mode, flags = (tuple(args) + (None, None, None))[:3]
            if not isinstance(path, (str, bytes, os.PathLike)):
                return None  # a file descriptor
            p = os.path.abspath(os.fsdecode(os.fspath(path)))
            if p.startswith("/proc/"):
                return self._proc(p)
            real = os.path.realpath(p)
            if real.startswith(self.kit):
                return "kit", real
            writes = (isinstance(mode, str) and any(c in mode for c in "wxa+")) or (
                mode is None and isinstance(flags, int) and bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT)))
            if writes and not (real + os.sep).startswith(self.work) and not real.startswith(self.temp) \
                    and not real.startswith(self.mine):
                return "outside", real
            return None
        if event == "import":
            name = str(args[0]) if args else ""
            if name.split(".")[0] in KIT_PACKAGES and name not in ALLOWED_IMPORTS and name not in KIT_PACKAGES:
                return "kit", f"import {name}"
            return None
        if event.startswith("ctypes."):
            return "ctypes", f"{event} {args[0] if args else ''}"[:200]
        return "spawn", f"{event} {str(args[0])[:160] if args else ''}"

    def _module(self, path: str) -> str | None:
        """The kit module a source or bytecode file holds (``harness/__pycache__/x.cpython-311.pyc``:
        ``harness.x``), or None outside the kit's packages."""
        for pkg in KIT_PACKAGES:
            root = os.path.join(self.kit_root, pkg) + os.sep
            if path.startswith(root):
                parts = [q for q in path[len(root):].split(os.sep) if q != "__pycache__"]
                if not parts:
                    return None
                parts[-1] = parts[-1].split(".")[0]
                if parts[-1] == "__init__":
                    parts.pop()
                return ".".join([pkg, *parts])
        return None

    @staticmethod
    def _proc(p: str) -> tuple[str, str] | None:
        parts = p.split("/")  # ['', 'proc', pid|self|thread-self|file, ...]
        who = parts[2] if len(parts) > 2 else ""
        if who in ("self", "thread-self", str(os.getpid())):
            leaf = parts[3] if len(parts) > 3 else ""
            return None if leaf in _OWN_PROC else ("proc", p)
        if not who.isdigit():
            return None if who in _OWN_PROC else ("proc", p)
        return "proc", p

    def _culprit(self, direct: bool, importing: bool = False) -> str | None:
        """file:line of the innermost frame in the submission's files or the working directory, or
        None: the kit's own frames come first (its own work, even when the script's call led to it),
        or, with ``direct``, a library's (torch starting its compiler is torch's doing)."""
        f: FrameType | None = sys._getframe(2)
        while f is not None:
            fn = f.f_code.co_filename
            if fn.startswith(self.mine) or fn.startswith(self.work):
                return f"{os.path.basename(fn)}:{f.f_lineno}"
            if fn in self.transparent or (importing and fn.startswith("<frozen importlib")):
                pass
            elif fn.startswith("<frozen importlib"):
                return None  # the import system reading a module: the import event judges that
            elif fn.startswith(self.kit) or (direct and not fn.startswith(_STDLIB) and not fn.startswith("<")):
                return None
            f = f.f_back
        return None


def install(send: Callable[[str, str, str], None], script: str, work_dir: str) -> Auditor:
    from pathlib import Path

    kit_root = str(Path(__file__).resolve().parent.parent)
    a = Auditor(send, [os.path.dirname(os.path.abspath(script))], work_dir, kit_root)
    sys.addaudithook(a.hook)
    return a

