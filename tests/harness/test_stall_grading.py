"""A grading keeps its short, manifest-set hang timeout and the same straggler rule as `trainwreck
run`: a slow but correct checkpoint upload is not failed as a hang (issue 30).

The test exercise (tests/fixtures/upload_stall_kit) has a 5 s hang timeout; its reference
solution's rank 0 uploads a 2 MiB checkpoint to the artifact store service at 0.1 MiB/s, about
20 s outside any collective, while rank 1 waits in the next gradient all-reduce. The run is made
as a grading makes every run (``grader.grade.run_role``: the manifest's limits, the store service,
the sandbox where it can run) and judged by ``completes``."""

from __future__ import annotations

import pytest

from grader.checks import Context, run_check
from grader.exercises import find
from grader.grade import run_role
from harness import rundir, sandbox
from harness.executor import executor_for
from tests.conftest import FIXTURES, assert_nothing_left

pytestmark = pytest.mark.slow
KIT = FIXTURES / "upload_stall_kit"


def test_a_reference_with_a_20_s_upload_stall_is_not_failed_as_hung(tmp_path):
    ex = find("upload-stall", root=KIT)
    assert ex.manifest.run.hang_timeout == 5
    ev = run_role(ex, ex.solution_dir, tmp_path / "run", "reference", "cpu", 2,
                  executor=executor_for(sandboxed=sandbox.probe().ok))
    assert_nothing_left(tmp_path / "run")
    assert ev.status == "ok", rundir.load_run(tmp_path / "run").get("hang")
    [spec] = [c for c in ex.manifest.checks if c.name == "completes"]
    verdict = run_check(spec, Context(manifest=ex.manifest, runs={"main": ev}))
    assert verdict.passed, verdict.message
    # The stall was seen, and told for what it was: rank 0 outside every collective, its upload
    # waiting for the store's socket to take more bytes (the client's socket has a timeout, so
    # Python polls it before each send), while rank 1 waited in DDP's all-reduce. 2 MiB at the
    # link's 0.1 MiB/s is 20 s; at least 12 s of it without any progress, whatever the machine's load.
    [ep] = rundir.load_run(tmp_path / "run")["stalls"]
    assert ep["kind"] == "straggler" and ep["ended_by"] == "progress" and ep["lasted_s"] >= 12, ep
    assert [(v["state"], v["doing"]) for v in ep["ranks"]] == [
        ("outside any collective", "waiting for a file descriptor (poll/select)"),
        ("waiting in a collective", None)], ep
