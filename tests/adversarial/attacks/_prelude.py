# ruff: noqa
# ---- hostile prelude (tests/adversarial/attacks/_prelude.py), put before main() by the suite ----
# Helpers every attack may use, written as an attacker would: find the kit, the run dir, the key.
import json as _json
import os as _os
import sys as _sys
import time as _time
from pathlib import Path as _Path


def _contained():
    """True inside the grading sandbox (the init of its PID namespace is bwrap). The latch that
    keeps the destructive attacks (fork bomb, allocation, disk) from running on a bare machine:
    there they stand down, and their case is skipped until grading is sandboxed."""
    try:
        with open("/proc/1/cmdline", "rb") as f:
            return f.read().split(b"\0")[0].endswith(b"bwrap")
    except OSError:
        return False


def _rank():
    return int(_os.environ.get("RANK", "0"))


def _kit():
    """The kit's root: above the harness package every exercise script imports."""
    import harness

    return _Path(harness.__file__).resolve().parent.parent


def _run_dir():
    """This run's folder: the harness's variable, else the parent of the working folder (the
    grader runs each role in <out>/runs/<token>/work, <out>/runs/<role> a link to <token>)."""
    d = _os.environ.get("TRAINWRECK_RUN_DIR")
    return _Path(d) if d else _Path.cwd().parent


def _out_dir():
    return _run_dir().parent.parent  # <out>/runs/<token> -> <out>


def _run_name():
    return _run_dir().name  # the folder's name: a random token in a grading


def _role():
    """main, resume, ws1, ...: the name of the link in <out>/runs that points at this run's folder,
    where the run can list <out>/runs; None where it cannot (the sandbox shows no other folder)."""
    d = _run_dir()
    try:
        for link in d.parent.iterdir():
            if link.is_symlink() and _os.path.realpath(link) == _os.path.realpath(d):
                return link.name
    except OSError:
        pass
    return None


def _maybe_main():
    """The grading's main run, or a run that cannot tell which it is (then every run tries)."""
    return _role() in ("main", None)


def _key():
    """The run key wherever a rank can read it: os.environ, else this process's environment block
    (/proc/self/environ keeps what the bootstrap popped), else the launcher's."""
    if _os.environ.get("TRAINWRECK_KEY"):
        return _os.environ["TRAINWRECK_KEY"]
    for pid in ("self", str(_os.getppid())):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                block = f.read()
        except OSError:
            continue
        for item in block.split(b"\0"):
            if item.startswith(b"TRAINWRECK_KEY=") and len(item) > len(b"TRAINWRECK_KEY="):
                return item.split(b"=", 1)[1].decode()
    return None


def _succeeded(what, detail=""):
    """A canary: this step of the attack reached something real (a key, the kit, a later run).
    The suite fails the case on any canary it finds under the case's folder."""
    try:
        with open(f"ATTACK-SUCCEEDED-{what}", "a") as f:
            f.write(f"{detail}\n")
    except OSError:
        pass


def _resign(path, key, edit):
    """Rewrite a records file in place (the harness's writers keep appending to it): every record
    through ``edit`` (None drops it), then signed with ``key``."""
    from harness import rundir

    out = []
    for line in _Path(path).read_text().splitlines():
        try:
            rec = _json.loads(line)
        except ValueError:
            continue
        rec.pop("mac", None)
        rec = edit(rec)
        if rec is not None:
            out.append(rundir.sign(rec, key) + "\n")
    with open(path, "r+") as f:
        f.seek(0)
        f.truncate()
        f.write("".join(out))
# ---- end of the prelude ----
