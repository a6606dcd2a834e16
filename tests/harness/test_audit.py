"""The audit hook's judgement: what the script caused (and only the script), reported once each.
The hook is called directly here, from code compiled as if it were in the script's file, the
kit's or a library's: a hook added to the test process could never be removed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.audit import MAX_EVENTS, Auditor

KIT = Path(__file__).resolve().parents[2]


def make(tmp_path):
    sent = []
    sub, work = tmp_path / "submission", tmp_path / "work"
    sub.mkdir()
    work.mkdir()
    a = Auditor(lambda *r: sent.append(r), [str(sub)], str(work), str(KIT))
    return a, sent, sub, work


def call_from(filename: str, a: Auditor, event: str, args: tuple) -> None:
    """Calls the hook from a frame whose file is ``filename``."""
    code = compile("hook(event, args)", filename, "exec")
    exec(code, {"hook": a.hook, "event": event, "args": args})


@pytest.mark.parametrize("event, args, kind", [
    ("open", ("/proc/1/cmdline", "r", 0), "proc"),
    ("open", ("/proc/self/environ", "rb", 0), "proc"),
    ("open", (str(KIT / "solutions" / "memory-leak" / "train.py"), "r", 0), "kit"),
    ("open", ("/etc/trainwreck-canary", "w", 0), "outside"),
    ("open", ("/etc/trainwreck-canary", None, os.O_WRONLY | os.O_CREAT), "outside"),
    ("ctypes.dlopen", ("libc.so.6",), "ctypes"),
    ("subprocess.Popen", ("/bin/sh", ["sh", "-c", "x"], None, None), "spawn"),
    ("open", ("/proc/self/status", "r", 0), None),       # the process's own counters
    ("open", ("/etc/hostname", "r", 0), None),           # reading the system's files
    ("open", ("/tmp/scratch.bin", "wb", 0), None),       # temporary files
    ("import", ("harness.instrument", None, [], [], []), "kit"),
    ("import", ("harness.workloads", None, [], [], []), None),  # the one module an exercise script may use
    ("import", ("numpy", None, [], [], []), None),
])
def test_what_the_script_does_is_reported(tmp_path, event, args, kind):
    a, sent, sub, work = make(tmp_path)
    call_from(str(sub / "train.py"), a, event, args)
    assert [s[0] for s in sent] == ([kind] if kind else [])
    if kind:
        assert sent[0][2] == "train.py:1"


@pytest.mark.parametrize("event, args", [
    ("compile", ("x = 1", "<payload>", "exec", 0)),
    ("exec", (compile("x = 1", "<payload>", "exec"),)),
])
def test_code_made_at_run_time_is_reported_once_by_its_name_when_the_script_runs_it(tmp_path, event, args):
    a, sent, sub, work = make(tmp_path)
    call_from(str(sub / "train.py"), a, event, args)
    call_from(str(sub / "train.py"), a, "compile" if event == "exec" else "exec", (compile("", "<payload>", "exec"),)
              if event == "compile" else ("", "<payload>", "exec", 0))  # the other half of the same exec: once
    assert sent == [("exec", "code named '<payload>'", "train.py:1")]


def test_a_file_of_the_scripts_own_folder_run_by_exec_is_the_scripts(tmp_path):
    a, sent, sub, work = make(tmp_path)
    (sub / "configurator.py").write_text("batch_size = 8\n")
    text = (sub / "configurator.py").read_text()
    call_from(str(sub / "train.py"), a, "compile", (text, "<string>", "exec", 0))  # exec(open(...).read())
    call_from(str(sub / "train.py"), a, "exec", (compile(text, "<string>", "exec"),))
    assert sent == []
    call_from(str(sub / "train.py"), a, "compile", ("import os", "<string>", "exec", 0))  # then a payload
    assert [s[0] for s in sent] == ["exec"]


@pytest.mark.parametrize("caller", [os.path.join(os.path.dirname(os.__file__), "dataclasses.py"),
                                    "/site-packages/torch/_dynamo/codegen.py"])
def test_code_the_standard_library_or_torch_makes_is_theirs(tmp_path, caller):
    a, sent, sub, work = make(tmp_path)
    call_from(caller, a, "compile", ("def __init__(self): pass", "<string>", "exec", 0))
    call_from(caller, a, "exec", (compile("x = 1", "<string>", "exec"),))
    assert sent == []


def test_writes_in_the_working_directory_are_the_job_s(tmp_path):
    a, sent, sub, work = make(tmp_path)
    call_from(str(sub / "train.py"), a, "open", (str(work / "out" / "ckpt.pt"), "wb", 0))
    assert sent == []


@pytest.mark.parametrize("via, event, args, reported", [
    ("<frozen importlib._bootstrap_external>", "open", (str(KIT / "harness" / "workloads.py"), "r", 0), False),
    (str(KIT / "harness" / "instrument.py"), "open", ("/proc/1/stat", "r", 0), False),  # the kit's own work
    (str(KIT / "harness" / "rawwrites.py"), "open", ("/proc/1/stat", "r", 0), True),  # its wrapper of open
    ("/venv/lib/python3.11/site-packages/torch/_inductor/cpp.py", "subprocess.Popen", ("g++",), False),
    ("/venv/lib/python3.11/site-packages/torch/serialization.py", "open", ("/proc/1/environ", "rb", 0), True),
])
def test_who_caused_it(tmp_path, via, event, args, reported):
    """The script calls ``via`` (the kit, or a library), which makes the call."""
    a, sent, sub, work = make(tmp_path)
    inner = compile("def f():\n    hook(event, args)\n", via, "exec")
    ns = {"hook": a.hook, "event": event, "args": args}
    exec(inner, ns)
    outer = compile("f()", str(sub / "train.py"), "exec")
    exec(outer, {"f": ns["f"]})
    assert bool(sent) is reported


@pytest.mark.parametrize("path, reported", [
    (KIT / "harness" / "procwatch.py", "import harness.procwatch"),
    (KIT / "harness" / "__pycache__" / "procwatch.cpython-311.pyc", "import harness.procwatch"),
    (KIT / "grader" / "checks" / "__init__.py", "import grader.checks"),
    (KIT / "harness" / "workloads.py", None),  # the one module an exercise script may use
])
def test_a_kit_module_the_import_system_reads_is_an_import(tmp_path, path, reported):
    """importlib.import_module(computed name) raises no ``import`` event, only the loader's open of
    the module's file: that open, under the script's call, is reported as the import."""
    a, sent, sub, work = make(tmp_path)
    inner = compile("def f():\n    hook(event, args)\n", "<frozen importlib._bootstrap_external>", "exec")
    ns = {"hook": a.hook, "event": "open", "args": (str(path), "r", 0)}
    exec(inner, ns)
    exec(compile("f()", str(sub / "train.py"), "exec"), {"f": ns["f"]})
    assert [s[1] for s in sent] == ([reported] if reported else [])
    if reported:  # the import event of an import statement names it alike: one report, not two
        call_from(str(sub / "train.py"), a, "import", (reported.split()[1], None, [], [], []))
        assert len(sent) == 1


def test_nothing_without_the_script_on_the_stack_and_each_once(tmp_path):
    a, sent, sub, work = make(tmp_path)
    a.hook("open", ("/proc/1/cmdline", "r", 0))  # called from this test file: not the script's
    assert sent == []
    for i in range(MAX_EVENTS + 10):
        call_from(str(sub / "train.py"), a, "open", ("/proc/1/cmdline", "r", 0))
        call_from(str(sub / "train.py"), a, "open", (f"/proc/{i + 2}/environ", "r", 0))
    assert len(sent) == MAX_EVENTS and len({s[1] for s in sent}) == MAX_EVENTS


@pytest.mark.slow
def test_a_real_run_reports_what_its_script_did(tmp_path):
    from grader.flags import run_flags
    from harness.launch import LaunchConfig, launch
    from tests.conftest import FIXTURES, assert_nothing_left

    res = launch(LaunchConfig(script=FIXTURES / "audited.py", run_dir=tmp_path / "run", cwd=tmp_path, nproc=1))
    assert_nothing_left(tmp_path / "run")
    assert res.status == "ok"
    flags = [f for f in run_flags("main", res.run_dir) if f.kind == "behaviour"]
    whats = " | ".join(f"{f.what} @ {f.where}" for f in flags)
    assert "read /proc/1/cmdline @ audited.py:12" in whats and "used ctypes: ctypes.dlopen" in whats
    assert "ran code made at run time: code named '<string>' @ audited.py:17" in whats
    # the harness's own reads of /proc, torch's libraries, the dataclass's and namedtuple's generated
    # code are not the script's
    assert len(flags) == 3, whats
