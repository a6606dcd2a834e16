"""Shared helpers. Launching real jobs is the point of most of these tests; they use 2 ranks with
gloo on the CPU, as CI does."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parent.parent


def leftover_ranks(marker: str) -> list[psutil.Process]:
    """Live processes started by the harness whose command line mentions ``marker``."""
    out = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            cmd = " ".join(p.info["cmdline"] or [])
            if marker in cmd and ("harness.bootstrap" in cmd or "torch.distributed.run" in cmd) \
                    and p.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            continue
    return out


def assert_nothing_left(marker: str, grace_s: float = 5.0) -> None:
    deadline = time.time() + grace_s
    while leftover_ranks(marker) and time.time() < deadline:
        time.sleep(0.2)
    left = leftover_ranks(marker)
    assert not left, f"processes left behind: {[p.pid for p in left]}"


@pytest.fixture
def fixture_script():
    return lambda name: FIXTURES / name
