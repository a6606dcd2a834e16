"""The run's settings reach the harness, never the script: a probe launched as a plain run, as a
grading's main run and as a grading's kill-and-restart role sees the same environment (its own copy
and the block /proc/self/environ keeps), the same command line, its launcher's too, and, in a grading, the settings
applied (one intra-op thread, the same TORCHELASTIC_MAX_RESTARTS in every role)."""

from __future__ import annotations

import json

import pytest

from grader.roles import FINGERPRINTS, grading_env
from harness import rundir
from harness.executor import Sandboxed
from harness.launch import Fault, LaunchConfig, launch
from harness.rundir import VISIBLE_ENV as VISIBLE
from tests.conftest import FIXTURES, assert_nothing_left

pytestmark = pytest.mark.slow

# Different in every launch by design (a fresh rendezvous, its own run dir), not by role
PER_LAUNCH = {"MASTER_PORT", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_ERROR_FILE"}


def probe(tmp_path, name, **cfg) -> dict:
    run_dir = tmp_path / name
    res = launch(LaunchConfig(script=FIXTURES / "env_probe.py", script_args=["--steps", "3"], nproc=1, run_dir=run_dir,
                              cwd=tmp_path / f"work-{name}", **cfg))
    assert_nothing_left(run_dir)
    assert res.status == "ok", res.status
    out = (rundir.rank_dir(run_dir, 0) / rundir.STDOUT).read_text()
    return json.loads(next(ln for ln in out.splitlines() if ln.startswith("PROBE "))[6:])


def test_no_role_of_a_grading_sees_its_settings_nor_a_plain_run_its_grading(tmp_path):
    plain = probe(tmp_path, "plain")
    main = probe(tmp_path, "main", env=grading_env())
    resume = probe(tmp_path, "resume", env=grading_env(dict(FINGERPRINTS)), max_restarts=1,
                   faults=[Fault(rank=0, step=50)])  # never reached: its settings are still passed
    for seen in (plain, main, resume):
        harness_vars = {k for k in seen["env"] + seen["block"] if k.startswith("TRAINWRECK_")}
        assert harness_vars <= VISIBLE, harness_vars
        assert not any(k.startswith("MALLOC_") for k in seen["block"])
        assert seen["argv"] == ["--steps", "3"]
    names = [set(s["env"]) - PER_LAUNCH for s in (plain, main, resume)]
    assert names[0] == names[1] == names[2]
    assert plain["cmdline"] == main["cmdline"] == resume["cmdline"]
    # the agent's command line holds none of torchrun's options (--max-restarts would name the role)
    assert plain["launcher"] == main["launcher"] == resume["launcher"]
    assert not any(a.startswith("--") for a in resume["launcher"]), resume["launcher"]
    roles = [{k: v for k, v in s["torch"].items() if k not in PER_LAUNCH} for s in (main, resume)]
    assert roles[0] == roles[1]  # values too: the torch and allocator settings a role could read
    # the grading's settings applied, the same in each of its roles, whatever the launch allowed
    assert main["threads"] == resume["threads"] == 1
    assert main["max_restarts"] == resume["max_restarts"] == "1" and plain["max_restarts"] == "0"


def test_sandboxed_no_process_of_the_run_holds_the_settings(tmp_path):
    """Sandboxed, the settings come over the channel: neither the rank's block, nor the launcher's,
    nor the sandbox init's holds one, and every role still sees the same."""
    from harness import sandbox

    if not sandbox.probe().ok:
        pytest.skip(sandbox.probe().reason)
    main = probe(tmp_path, "main", env=grading_env(), executor=Sandboxed())
    resume = probe(tmp_path, "resume", env=grading_env(dict(FINGERPRINTS)), max_restarts=1, executor=Sandboxed(),
                   faults=[Fault(rank=0, step=50)])
    for seen in (main, resume):
        assert seen["others"][next(iter(seen["others"]))] is not None  # the launcher's block was read
        for names in [seen["env"], seen["block"], *(b for b in seen["others"].values() if b)]:
            assert not [k for k in names if k.startswith("TRAINWRECK_") and k not in VISIBLE], names
    assert set(main["env"]) - PER_LAUNCH == set(resume["env"]) - PER_LAUNCH
    assert main["launcher"] == resume["launcher"] and not any(a.startswith("--") for a in main["launcher"])
    assert main["threads"] == resume["threads"] == 1 and main["max_restarts"] == resume["max_restarts"] == "1"
