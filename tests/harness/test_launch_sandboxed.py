"""``harness.launch`` with the ``Sandboxed`` executor (docs/sandbox.md, "Wiring"): the elastic launcher and its
ranks in bubblewrap, records over the parent's channel, memory sampled from outside, limits, and
the faults: a rank SIGKILLed, the launch interrupted, the grader SIGKILLed (the channel folder it
leaves is cleaned by the next one)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness import channel_server, rundir, sandbox
from harness.channel import CHANNEL_ENV
from harness.errors import LaunchError
from harness.executor import Plain, RunSpec, Sandboxed, executor_for
from harness.launch import KIT_ROOT, Fault, LaunchConfig, build_env, launch
from harness.limits import Limits
from tests.conftest import FIXTURES, assert_nothing_left, ctrl_c_reaches_it

needs_bwrap = pytest.mark.skipif(not sandbox.probe().ok, reason=f"no sandbox here: {sandbox.probe().reason}")


def run(tmp_path: Path, script: str, *args: str, **cfg):
    cfg.setdefault("run_dir", tmp_path / "run")
    cfg.setdefault("cwd", tmp_path / "run" / "work")
    res = launch(LaunchConfig(script=FIXTURES / script, script_args=list(args), executor=Sandboxed(), **cfg))
    assert_nothing_left(cfg["run_dir"])
    return res


def records(res, rank: int, name: str = rundir.EVENTS) -> rundir.Records:
    key = rundir.load_run(res.run_dir)["key"]
    return rundir.read_records(rundir.rank_dir(res.run_dir, rank) / name, key)


# -- without launching ---------------------------------------------------------------------------

def test_a_sandboxed_launch_needs_a_work_dir():
    with pytest.raises(LaunchError, match="needs a work dir"):
        LaunchConfig(script=FIXTURES / "ddp_ok.py", executor=Sandboxed()).validate()


@pytest.mark.parametrize("executor", [Plain(), Sandboxed()])
def test_the_key_is_in_no_environment_the_launch_builds_until_its_executor_gives_it(tmp_path, monkeypatch,
                                                                                     executor):
    monkeypatch.setenv(rundir.KEY_ENV, "a key of the caller's")
    cfg = LaunchConfig(script=FIXTURES / "ddp_ok.py", executor=executor, cwd=tmp_path)
    assert rundir.KEY_ENV not in build_env(cfg, tmp_path, "cpu")


@needs_bwrap
def test_the_key_is_never_in_a_sandboxed_ranks_environment(tmp_path):
    env = {rundir.KEY_ENV: "k" * 32, "TRAINWRECK_FAULTS": "[]", "PATH": "/usr/bin"}
    spec = RunSpec(kit_root=KIT_ROOT, run_dir=tmp_path / "run", key="k" * 32, cwd=tmp_path / "work",
                   script=(FIXTURES / "ddp_ok.py").resolve(), gpu=False, limits=Limits())
    (tmp_path / "work").mkdir()
    sandboxed = Sandboxed().prepare(spec)
    try:
        sandboxed.environ(env)
    finally:
        sandboxed.close()
    assert rundir.KEY_ENV not in env and "TRAINWRECK_FAULTS" not in env  # the settings go over the channel
    plain = dict(env)
    Plain().prepare(spec).environ(plain)
    assert plain[rundir.KEY_ENV] == "k" * 32  # unsandboxed, the ranks sign their own records


@pytest.mark.parametrize("sandboxed", [True, False])
def test_a_channel_left_in_the_callers_environment_never_reaches_a_rank(tmp_path, monkeypatch, sandboxed):
    monkeypatch.setenv(CHANNEL_ENV, "/tmp/tw-chan-gone/sock")
    cfg = LaunchConfig(script=FIXTURES / "ddp_ok.py", executor=executor_for(sandboxed), cwd=tmp_path)
    assert CHANNEL_ENV not in build_env(cfg, tmp_path, "cpu")


def test_a_stale_channel_folder_of_a_dead_grader_is_removed(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f"{channel_server.DIR_PREFIX}{dead.pid}-abc123"
    stale.mkdir()
    (stale / "sock").write_text("")  # stands for the dead socket
    alive = tmp_path / f"{channel_server.DIR_PREFIX}{os.getppid()}-def456"
    alive.mkdir()
    other = tmp_path / f"{channel_server.DIR_PREFIX}legacy"
    other.mkdir()
    assert channel_server.sweep_stale(tmp_path) == [stale]
    assert not stale.exists() and alive.exists() and other.exists()


# -- launched -------------------------------------------------------------------------------------

@needs_bwrap
@pytest.mark.slow
def test_an_honest_job_runs_sandboxed_and_is_observed_as_before(tmp_path):
    res = run(tmp_path, "ddp_ok.py", "--steps", "12")
    assert res.status == "ok" and [r["steps"] for r in res.ranks] == [12, 12]
    assert all(r["exit_code"] == 0 for r in res.ranks) and res.limit is None
    run_json = rundir.load_run(res.run_dir)
    assert run_json["sandbox"]["isolated"] is True and run_json["sandboxed"] is True
    assert run_json["sandbox"]["tampering"] == [] and run_json["config"]["sandbox"] is True
    for rank in (0, 1):
        ev = records(res, rank)
        assert ev.forged == 0 and all("rt" in e for e in ev.valid)  # signed by the parent on receipt
        boot = ev.valid[0]
        assert boot["kind"] == "boot" and boot["pid"] != boot["ns_pid"]
        exit_rec = next(e for e in ev.valid if e["kind"] == "exit")
        assert exit_rec["params_sha256"] == rundir.sha256_file(rundir.rank_dir(res.run_dir, rank) / rundir.FINAL_PARAMS)
        assert records(res, rank, "proc.jsonl").valid  # sampled from outside
    assert (res.run_dir / "channel.json").exists() and (res.run_dir / "sandbox.json").exists()


@needs_bwrap
@pytest.mark.slow
def test_a_hang_is_reported_with_each_ranks_blocked_line(tmp_path):
    """The watchdog signals the ranks' outside pids for their stacks, which arrive over the channel."""
    res = run(tmp_path, "hang.py", hang_timeout=6)
    assert res.status == "hung"
    sites = {r["rank"]: r["blocked_at"] for r in res.hang["ranks"]}
    assert sites[0].endswith("hang.py:19") and sites[1].endswith("hang.py:17"), sites
    assert [r["pending_collective"]["op"] for r in res.hang["ranks"]] == ["barrier", "all_reduce"]


@needs_bwrap
@pytest.mark.slow
def test_a_rank_killed_by_fault_injection_is_named_with_its_signal(tmp_path):
    res = run(tmp_path, "ddp_ok.py", "--steps", "12", faults=[Fault(rank=1, step=5)])
    assert res.status == "failed"
    assert res.failure["rank"] == 1 and "signal 9 after optimizer step 5" in res.failure["error"]
    assert res.ranks[1]["exit_code"] == -9 and res.ranks[1]["steps"] == 5


@needs_bwrap
@pytest.mark.slow
def test_a_rank_sigkilled_from_outside_is_named_with_its_signal(tmp_path):
    """As the OOM killer would: the rank's outside pid, from its boot record, SIGKILLed."""
    outcome = {}

    def kill_rank_1(snap):
        if outcome or not any(r.rank == 1 and r.steps >= 3 for r in snap.ranks):
            return
        ev = rundir.iter_new_lines(rundir.rank_dir(tmp_path / "run", 1) / rundir.EVENTS, 0)[0]
        pid = next(e["pid"] for e in ev if e.get("kind") == "boot")
        os.kill(pid, signal.SIGKILL)
        outcome["pid"] = pid

    res = launch(LaunchConfig(script=FIXTURES / "slow.py", run_dir=tmp_path / "run", cwd=tmp_path / "run" / "work",
                              executor=Sandboxed(), timeout=120), on_progress=kill_rank_1)
    assert_nothing_left(tmp_path / "run")
    assert outcome and res.status == "failed"
    assert res.failure["rank"] == 1 and "signal 9" in res.failure["reason"], res.failure
    assert res.ranks[1]["exit_code"] == -9


@needs_bwrap
@pytest.mark.slow
def test_a_rank_over_its_memory_cap_ends_the_run_with_status_limit(tmp_path):
    res = run(tmp_path, "hostile/alloc.py", nproc=1, limits=Limits(memory_mb=600))
    assert res.status == "limit"
    assert res.limit["what"] == "memory" and res.limit["rank"] == 0
    assert "rank 0 used" in res.limit["message"] and "memory limit of 600 MiB" in res.limit["message"]
    run_json = rundir.load_run(res.run_dir)
    assert run_json["status"] == "limit" and run_json["limit"]["rank"] == 0
    assert run_json["sandbox"]["violations"][0]["what"] == "memory"


@needs_bwrap
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupting_a_sandboxed_run_ends_everything_and_records_it(tmp_path, sig):
    cmd = [sys.executable, "-m", "grader.cli", "run", "--sandbox", str(FIXTURES / "slow.py"), "--json",
           "--run-dir", str(tmp_path / "run")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path, text=True,
                            preexec_fn=ctrl_c_reaches_it)
    events = tmp_path / "run" / "ranks" / "1" / "events.jsonl"
    deadline = time.time() + 90
    while time.time() < deadline and not (events.exists() and '"step"' in events.read_text()):
        time.sleep(0.2)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert json.loads(out)["status"] == "interrupted"
    run_json = rundir.load_run(tmp_path / "run")
    assert run_json["status"] == "interrupted" and run_json["sandbox"]["isolated"]
    assert_nothing_left(tmp_path)


GRADER_KILLED = """
import sys
from pathlib import Path
from harness.executor import Sandboxed
from harness.launch import LaunchConfig, launch
launch(LaunchConfig(script=Path(sys.argv[1]), run_dir=Path(sys.argv[2]), cwd=Path(sys.argv[2]) / "work",
                    executor=Sandboxed()))
"""


@needs_bwrap
@pytest.mark.slow
def test_sigkill_of_the_launching_process_leaves_nothing_running(tmp_path):
    """Nothing of the grader's runs: bwrap dies with it (--die-with-parent), the kernel ends the
    sandbox's PID namespace; the channel folder it could not remove is removed by the next launch."""
    run_dir = tmp_path / "run"
    parent = subprocess.Popen([sys.executable, "-c", GRADER_KILLED, str(FIXTURES / "slow.py"), str(run_dir)],
                              cwd=tmp_path)
    events = run_dir / "ranks" / "1" / "events.jsonl"
    deadline = time.time() + 90
    while time.time() < deadline and not (events.exists() and '"step"' in events.read_text()):
        time.sleep(0.2)
    assert events.exists()
    stale = list(Path("/tmp").glob(f"{channel_server.DIR_PREFIX}{parent.pid}-*"))
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    assert_nothing_left(tmp_path, grace_s=15)
    assert not (run_dir / "run.json").exists()  # no half-written record: none at all
    assert stale and all(p.exists() for p in stale)
    res = run(tmp_path / "next", "ddp_ok.py", "--steps", "4")
    assert res.status == "ok"
    assert not any(p.exists() for p in stale)


@needs_bwrap
@pytest.mark.slow
def test_profile_traces_reach_the_run_dir_over_the_channel(tmp_path):
    from harness.phases import read_run

    res = run(tmp_path, "ddp_ok.py", "--steps", "12", profile=True)
    assert res.status == "ok"
    prof = read_run(res.run_dir)
    for r in prof["ranks"]:
        assert r["trace"] and Path(r["trace"]).is_file() and r["trace_error"] is None, r
        assert r["counted"] > 0


@needs_bwrap
@pytest.mark.slow
def test_reads_in_loader_workers_reach_the_ledger_whatever_started_them(tmp_path):
    """Training through persistent forked workers, evaluation through workers started with spawn
    (the bootstrap never ran there): every read reaches the rank's signed ledger, the spawned ones
    with no step (the parent's receive time dates them); the parent samples the rank's tree with its
    workers, and its generation moves as evaluation workers come and go."""
    res = run(tmp_path, "loader_workers.py", "--steps", "8", "--eval-context", "spawn")
    assert res.status == "ok", res.failure
    for rank in (0, 1):
        led = records(res, rank, rundir.SAMPLES)
        assert led.forged == 0 and all("rt" in x for x in led.valid)
        train = [i for x in led.valid if x["ds"] == "train" for i in x["i"]]
        assert len(train) >= 32 and len(set(train[:32])) == 32  # its half of the first epoch, read ahead by workers
        val = [x for x in led.valid if x["ds"] == "val"]
        assert sorted(i for x in val for i in x["i"]) == sorted(list(range(16)) * 2)  # two evaluations of 16
        assert all(x["a"] == 0 and "s" not in x for x in val)  # spawned: no step of their own
        proc = records(res, rank, "proc.jsonl").valid
        assert all("tree_mb" in p for p in proc) and max(p["procs"] for p in proc) >= 3
        assert max(p["gen"] for p in proc) >= 1


@needs_bwrap
@pytest.mark.slow
def test_a_script_s_own_datasets_are_accounted_from_outside(tmp_path):
    """A script importing nothing of the kit: what its DataLoaders fetched, in the main process, in
    forked workers and in a spawned one (where the bootstrap never ran), and what it indexed by hand,
    reaches the signed loader ledger, and the run's summary partitions the training set between the
    ranks."""
    res = run(tmp_path, "own_data.py", "--steps", "8", "--eval-context", "spawn")
    assert res.status == "ok", res.failure
    for rank in (0, 1):
        led = records(res, rank, rundir.LOADS)
        assert led.forged == 0 and all("rt" in x for x in led.valid)
        val = [x for x in led.valid if x["ds"] == "Rows[16]"]
        assert sorted(i for x in val for i in x["i"]) == list(range(16)) and all("s" not in x for x in val)
        assert {x.get("w") for x in led.valid if x["ds"] == "Rows[64]"} == {0, 1}  # both forked workers
        held = [x for x in led.valid if x["ds"] == "Scaled[24]"]  # indexed by hand: the wrapper, once per read
        assert [x["i"] for x in held] == list(range(rank, 24, 2)) and all(x["d"] == 1 and x["s"] == 8 for x in held)
        assert not any(x["ds"] == "Rows[24]" for x in led.valid)  # the dataset it wraps is not read twice
    by_ds = {d["dataset"]: d for d in res.samples}
    assert by_ds["Rows[64]"]["ranks"] == {0: {"items": 32, "distinct": 32}, 1: {"items": 32, "distinct": 32}}
    assert (by_ds["Rows[64]"]["distinct"], by_ds["Rows[64]"]["shared"]) == (64, 0)
    assert by_ds["Stream[iterable]"]["ranks"] == {0: {"items": 10, "distinct": None}, 1: {"items": 10, "distinct": None}}
    assert json.loads((res.run_dir / "run.json").read_text())["samples"][0]["dataset"] == "Rows[16]"
