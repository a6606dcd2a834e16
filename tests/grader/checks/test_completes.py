"""completes: statuses and exit codes."""

from __future__ import annotations

import pytest

from grader.checks import run_check
from tests.grader.fakes import ctx_for, spec


@pytest.mark.parametrize("status, says", [("ok", "exited 0"), ("failed", "failed"), ("timeout", "limit")])
def test_completes(tmp_path, status, says):
    c = run_check(spec("completes"), ctx_for(tmp_path, main={"status": status}))
    assert c.passed is (status == "ok") and says in c.message
