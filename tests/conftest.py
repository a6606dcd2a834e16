"""Shared helpers. Launching real jobs is the point of most of these tests; they use 2 ranks with
gloo on the CPU, as CI does."""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

import psutil
import pytest

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parent.parent


def ctrl_c_reaches_it() -> None:
    """``preexec_fn`` for a process a test will interrupt with SIGINT: a shell runs a background job
    (`make test &`, nohup) with SIGINT ignored, Python keeps an inherited SIG_IGN, and the test's
    Ctrl-C would then reach nothing (seen: four interrupt tests timed out in a backgrounded CI run)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def leftover_ranks(marker: str | Path) -> list[psutil.Process]:
    """Live processes of the launch identified by ``marker`` (its run dir, or a directory above it):
    anything whose command line names it, or whose environment points the rank bootstrap into it.
    Other launches running on the machine at the same time (other tests, other users) do not count."""
    marker = str(marker).rstrip("/")

    def inside(value: str) -> bool:
        return value == marker or value.startswith(marker + "/")

    out = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if p.pid == os.getpid() or p.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if any(inside(a) for a in p.info["cmdline"] or []) \
                    or inside(p.environ().get("TRAINWRECK_RUN_DIR", "")):
                out.append(p)
        except psutil.Error:  # gone meanwhile, or not ours to inspect
            continue
    return out


def assert_nothing_left(marker: str | Path, grace_s: float = 5.0) -> None:
    deadline = time.time() + grace_s
    while leftover_ranks(marker) and time.time() < deadline:
        time.sleep(0.2)
    left = leftover_ranks(marker)
    assert not left, f"processes left behind: {[(p.pid, p.cmdline()) for p in left]}"


@pytest.fixture
def fixture_script():
    return lambda name: FIXTURES / name


@pytest.fixture(autouse=True)
def _own_trainwreck_home(tmp_path_factory, monkeypatch):
    """Every test gets its own TRAINWRECK_HOME (sessions, practice progress, quiz state), so no test
    reads or prunes the real ~/.trainwreck and no two tests share state."""
    monkeypatch.setenv("TRAINWRECK_HOME", str(tmp_path_factory.mktemp("home")))


def kit_copy(dest: Path) -> Path:
    """A copy of the kit at ``dest`` (its code, exercises, answers and rubrics; no caches, no tests),
    for ``TRAINWRECK_KIT``: whole, so that a sandbox that shows the kit shows this one."""
    skip = shutil.ignore_patterns(".git", ".venv", ".trainwreck", "runs", "tests", "__pycache__", ".*_cache",
                                  "*.egg-info", ".benchmarks")
    shutil.copytree(REPO, dest, symlinks=True, ignore=skip)
    return dest


@pytest.fixture
def private_kit(tmp_path, monkeypatch) -> Path:
    """A copy of the kit as ``TRAINWRECK_KIT``. A session arms the answers it is given, and a test
    that counts reads of them must not see a test beside it (pytest-xdist) read the kit's own copy
    or open a session of its own on it."""
    kit = kit_copy(tmp_path / "kit")
    monkeypatch.setenv("TRAINWRECK_KIT", str(kit))
    return kit


@pytest.fixture(autouse=True, scope="session")
def _one_checkpoint_reader():
    """Unit tests read hundreds of small checkpoints from as many temporary run dirs: one unisolated
    reader process serves them all (a sandboxed one per run dir costs a torch import each). The
    sandboxed reader has tests of its own (tests/grader/evidence/test_reader.py), and gradings that
    launch runs set it back (``grader.grade`` sandboxes whatever the environment says)."""
    from grader.evidence.reader import SANDBOX_ENV

    old = os.environ.get(SANDBOX_ENV)
    os.environ[SANDBOX_ENV] = "0"
    yield
    if old is None:
        os.environ.pop(SANDBOX_ENV, None)
    else:
        os.environ[SANDBOX_ENV] = old


def pytest_collection_modifyitems(config, items):
    from tests.areas import area_of

    for item in items:
        area = area_of(str(Path(str(item.fspath)).resolve().relative_to(REPO)))
        if area is not None:
            item.add_marker(area)
