"""The harness on real 2-rank gloo jobs: outcomes become statuses, every rank is observed from
outside the script, and nothing is left running afterwards."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from harness import rundir
from harness.launch import Fault, LaunchConfig, launch
from harness.liveness import BUSY_FRACTION
from harness.observe import observe_rank
from tests.conftest import FIXTURES, assert_nothing_left, ctrl_c_reaches_it

pytestmark = pytest.mark.slow


def run(tmp_path: Path, script: str, *args: str, **cfg):
    cfg.setdefault("run_dir", tmp_path / "run")
    cfg.setdefault("cwd", tmp_path)
    res = launch(LaunchConfig(script=FIXTURES / script, script_args=list(args), **cfg))
    assert_nothing_left(cfg["run_dir"])
    return res


def records(res, rank: int, name: str = rundir.EVENTS) -> list[dict]:
    key = rundir.load_run(res.run_dir)["key"]
    return rundir.read_records(rundir.rank_dir(res.run_dir, rank) / name, key).valid


@pytest.fixture(scope="module")
def ok_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ok")
    return run(tmp, "ddp_ok.py", "--steps", "12")


def test_plain_ddp_script_is_observed_without_changes(ok_run):
    assert ok_run.status == "ok" and ok_run.exit_code == 0
    assert [r["steps"] for r in ok_run.ranks] == [12, 12]
    assert all(r["exit_code"] == 0 and r["steps_per_s"] > 0 and r["peak_rss_mb"] > 0 for r in ok_run.ranks)


def test_final_params_are_saved_and_equal_across_ranks(ok_run):
    p0 = torch.load(rundir.rank_dir(ok_run.run_dir, 0) / rundir.FINAL_PARAMS)
    p1 = torch.load(rundir.rank_dir(ok_run.run_dir, 1) / rundir.FINAL_PARAMS)
    assert set(p0) == {"0.weight", "0.bias", "2.weight", "2.bias"}  # DDP's "module." stripped
    assert all(torch.equal(p0[k], p1[k]) for k in p0)
    for rank in (0, 1):  # the file is the one the signed exit record vouches for
        exit_rec = next(e for e in records(ok_run, rank) if e["kind"] == "exit")
        assert exit_rec["params_sha256"] == rundir.sha256_file(rundir.rank_dir(ok_run.run_dir, rank) / rundir.FINAL_PARAMS)


def test_final_params_are_the_trained_values(ok_run):
    """ddp_ok.py's 12 steps redone in one process (DDP averages the two ranks' gradients): the
    saved parameters are the end of training, not a stale or initial copy."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gens = [torch.Generator().manual_seed(r) for r in (0, 1)]
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    for _ in range(12):
        loss = sum(model(torch.randn(8, 16, generator=g)).pow(2).mean() for g in gens) / 2
        opt.zero_grad()
        loss.backward()
        opt.step()
    saved = torch.load(rundir.rank_dir(ok_run.run_dir, 0) / rundir.FINAL_PARAMS)
    for k, v in model.state_dict().items():
        assert not torch.equal(saved[k], initial[k])
        torch.testing.assert_close(saved[k], v, rtol=1e-5, atol=1e-6)


def test_collective_trace_sees_ddps_own_all_reduces_and_the_scripts(ok_run):
    """Traced at the dispatcher: DDP's C++ bucket all-reduce (one per backward, issued while the
    script's loss.backward() line runs), DDP's set-up collectives, and the script's own calls."""
    for rank in (0, 1):
        enters = [r for r in records(ok_run, rank, rundir.COLLECTIVES) if r["ph"] == "enter"]
        exits = {r["seq"] for r in records(ok_run, rank, rundir.COLLECTIVES) if r["ph"] == "exit"}
        assert {r["seq"] for r in enters} == exits  # every one completed
        buckets = [r for r in enters if r["by"] == "backward"]
        assert [r["op"] for r in buckets] == ["all_reduce"] * 12 and all(r["api"] is None for r in buckets)
        assert all(r["site"].endswith("ddp_ok.py:28") and r["shapes"] == [[[577]]] for r in buckets)
        script = [r for r in enters if r["api"] == "all_reduce"]
        assert [(r["step"], r["site"].rsplit("/", 1)[-1], r["async"]) for r in script] == \
            [(s, "ddp_ok.py:32", False) for s in (1, 5, 9)]
        setup = [r["op"] for r in enters if r["by"] == "ddp" and r["step"] == 0]
        assert setup[:1] == ["all_gather"] and "broadcast" in setup  # parameter check, module state sync
    key = rundir.load_run(ok_run.run_dir)["key"]
    obs = observe_rank(ok_run.run_dir, 0, key)
    assert obs.pending_collective is None and obs.last_collective["op"] == "all_reduce"
    assert all(r["last_location"].endswith("tests/fixtures/ddp_ok.py:28") for r in ok_run.ranks)
    assert all((r["location_kind"], r["location_op"]) == ("last collective", "all_reduce") for r in ok_run.ranks)


def test_each_step_record_carries_the_loss_backpropagated_in_it(ok_run):
    """Rank 0's first loss, recomputed: the model and rank 0's batch before any update."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    with torch.no_grad():
        first = float(model(torch.randn(8, 16, generator=torch.Generator().manual_seed(0))).pow(2).mean())
    steps = [r for r in records(ok_run, 0) if r["kind"] == "step"]
    assert steps[0]["loss"] == pytest.approx(first, rel=1e-6)
    assert all(r["n_backward"] == 1 and r["loss"] > 0 for r in steps) and "loss_scale" not in steps[0]


def test_forged_lines_are_not_counted(ok_run, tmp_path):
    key = rundir.load_run(ok_run.run_dir)["key"]
    events = rundir.rank_dir(ok_run.run_dir, 0) / rundir.EVENTS
    before = observe_rank(ok_run.run_dir, 0, key)
    with open(events, "a") as f:  # what a script could append: plausible, but not signed
        f.write(json.dumps({"kind": "step", "attempt": 0, "step": 13, "t": time.time(), "mac": "0" * 32}) + "\n")
        f.write(rundir.sign({"kind": "step", "attempt": 0, "step": 14, "t": time.time()}, "not-the-key") + "\n")
    after = observe_rank(ok_run.run_dir, 0, key)
    assert after.steps == before.steps == 12
    assert after.forged_lines == before.forged_lines + 2


def test_crash_on_one_rank_names_it_with_its_traceback(tmp_path):
    res = run(tmp_path, "crash.py")
    assert res.status == "failed"
    assert res.failure["rank"] == 1 and res.failure["reason"] == "exception"
    assert "ValueError: synthetic failure on rank 1 at step 3" in res.failure["error"]
    assert 'crash.py", line 15' in res.failure["error"]  # the raising line is in the tail
    assert res.failure["error"].startswith('Traceback (most recent call last):\n  File "')  # the script's frame first
    assert "bootstrap.py" not in res.failure["error"] and "runpy" not in res.failure["error"]
    r0, r1 = res.ranks
    assert r1["last_location"].endswith("crash.py:15") and r1["exit_code"] == 1 and r1["steps"] == 4
    assert r1["location_kind"] == "raised"
    # Rank 0 lost its peer in the all_reduce on line 17. Whether it raised there first or torchrun
    # ended it still waiting is a race between gloo seeing the closed socket and the agent's monitor
    # seeing rank 1's exit (a loaded CI machine gave the second): either way the line is the same,
    # and an error is recorded only where it raised.
    assert r0["last_location"].endswith("crash.py:17"), r0
    key = rundir.load_run(res.run_dir)["key"]
    lost = observe_rank(res.run_dir, 0, key).pending_collective
    assert lost["op"] == "all_reduce"
    if r0["location_kind"] == "raised":
        assert "Connection closed by peer" in lost["error"]
    else:
        assert r0["location_kind"] == "pending collective" and "error" not in lost, r0


def test_killed_rank_is_named_not_the_peer_that_lost_it(tmp_path):
    # Rank 1 is SIGKILLed; rank 0 then fails with "Connection closed by peer" and writes an exit
    # record with a traceback. The cause is still rank 1.
    res = run(tmp_path, "ddp_ok.py", "--steps", "12", faults=[Fault(rank=1, step=5)])
    assert res.status == "failed"
    assert res.failure["rank"] == 1 and "fault injection" in res.failure["reason"]
    assert "signal 9 after optimizer step 5" in res.failure["error"]
    assert res.ranks[1]["exit_code"] == -9 and res.ranks[1]["steps"] == 5  # from the launcher: no exit record


def test_rank_exiting_early_while_its_peer_waits(tmp_path):
    res = run(tmp_path, "early_exit.py", hang_timeout=20)
    assert res.status == "failed"  # gloo sees the closed connection: no need to wait for a hang
    assert res.failure["rank"] == 0 and res.failure["reason"] == "lost a peer"
    assert "rank 1 (after step 3) had already exited normally" in res.failure["note"]
    assert [r["exit_code"] for r in res.ranks] == [1, 0]
    assert res.ranks[0]["last_location"].endswith("early_exit.py:16")


def test_hang_is_reported_with_each_ranks_blocked_line(tmp_path):
    """The rank-0-only barrier: both ranks idle in a collective, so no progress of any kind. The
    parent's CPU readings of the two blocked gloo ranks are what BUSY_FRACTION was chosen from
    (measured here: 0.0-0.01 of a core per 1 s sample)."""
    res = run(tmp_path, "hang.py", hang_timeout=6)
    assert res.status == "hung"
    for r in res.hang["ranks"]:
        assert r["state"] == "waiting in a collective" and r["cpu_fraction"] < BUSY_FRACTION, r
    assert [r["pending_collective"]["op"] for r in res.hang["ranks"]] == ["barrier", "all_reduce"]
    assert res.exit_code not in (0, None)  # the launcher's real exit code once ended, not a reaped 0
    sites = {r["rank"]: r["blocked_at"] for r in res.hang["ranks"]}
    assert sites[0].endswith("hang.py:19")  # the rank-0-only barrier
    assert sites[1].endswith("hang.py:17")  # the all_reduce rank 1 waits in
    assert res.hang["ranks"][0]["pending_collective"]["op"] == "barrier"
    assert (res.run_dir / "hang.txt").read_text().count("blocked at") == 2
    assert [r["last_location"] for r in res.ranks] == [res_site(sites[0]), res_site(sites[1])]
    assert res.hang["phase"] == "running" and [r["last_step"] for r in res.hang["ranks"]] == [6, 7]
    # A deadlock: reported within hang-timeout + 2 s of the last progress, by the report's own clock
    # (the classification is a look every second; the stack dumps take a fraction of one), and
    # by the ranks' last records (written by the ranks, not the watchdog).
    h = json.loads((res.run_dir / "hang.json").read_text())
    assert h["kind"] == "deadlock" and h["ended_by"] == "hang timeout"
    assert h["last_progress_at"] <= h["detected_at"] <= h["last_progress_at"] + 6 + 2
    assert h["detected_at"] <= h["written_at"] <= h["last_progress_at"] + 6 + 2 + 4  # + STACK_WAIT_S at most
    last = max(r["t"] for rank in (0, 1) for name in (rundir.EVENTS, rundir.COLLECTIVES)
               for r in records(res, rank, name))
    # Within the hang timeout plus a few seconds of the ranks' last record: the CPU readings that
    # follow it (the ranks finishing their step) add at most a sample interval or two.
    assert h["detected_at"] - last <= 6 + 4, h["detected_at"] - last


def res_site(site: str) -> str:
    return str(Path(site).relative_to(Path.cwd())) if site.startswith(str(Path.cwd()) + "/") else site


def test_hang_before_the_first_step_gets_the_startup_allowance(tmp_path):
    # 20 s: torch's import alone can take several seconds on a busy machine (CI runs in parallel),
    # and no record marks progress during it.
    res = run(tmp_path, "hang_startup.py", startup_timeout=20, hang_timeout=2)
    assert res.status == "hung"
    h = res.hang
    assert h["phase"] == "startup" and [r["last_step"] for r in h["ranks"]] == [0, 0]
    assert h["ranks"][0]["blocked_at"].endswith("hang_startup.py:7")
    assert h["ranks"][1]["blocked_at"].endswith("hang_startup.py:9")
    # Not the 2 s hang timeout (which would fire during start-up), and within 2 s of the 20 s allowance.
    assert h["kind"] == "deadlock" and h["ended_by"] == "start-up allowance"
    assert 20 <= h["detected_at"] - h["last_progress_at"] <= 20 + 2
    assert "start-up allowance 20 s" in (res.run_dir / "hang.txt").read_text()


def test_a_node_waiting_in_rendezvous_is_left_to_the_stall_limit(tmp_path):
    """No rank ever starts (nnodes 2, the second node never comes): no collective is stuck, so the
    start-up allowance does not end it (torch's rendezvous has its own timeout); the stall limit does."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = run(tmp_path, "ddp_ok.py", nproc=1, nnodes=2, rdzv_endpoint=f"127.0.0.1:{port}", startup_timeout=2,
              stall_timeout=6)
    assert res.status == "hung" and res.ranks == [] and res.hang["ranks"] == []
    assert (res.hang["kind"], res.hang["ended_by"]) == ("no progress at all", "stall limit")
    assert 6 <= res.hang["since_progress_s"] <= 6 + 2
    assert "No rank has started" in (res.run_dir / "hang.txt").read_text()


def test_a_daemonized_helper_does_not_outlive_the_job(tmp_path):
    res = run(tmp_path, "stray.py")  # run() asserts that nothing carrying the run's environment is left
    assert res.status == "ok"


def test_leak_shows_in_per_step_rss(tmp_path):
    res = run(tmp_path, "leak.py")
    assert res.status == "ok"
    key = rundir.load_run(res.run_dir)["key"]
    rss = observe_rank(res.run_dir, 0, key).rss_mb
    assert len(rss) == 60 and rss[-1] - rss[10] > 20  # ~1 MB per step


def test_wall_clock_timeout(tmp_path):
    res = run(tmp_path, "slow.py", timeout=8, hang_timeout=30)
    assert res.status == "timeout" and res.exit_code not in (0, None)
    assert rundir.load_run(res.run_dir)["status"] == "timeout" and res.hang is None


def test_a_straggler_past_the_runs_time_limit_ends_as_timeout_with_the_report_saying_straggler(tmp_path):
    """As a grading runs it (a short hang timeout, a wall-clock limit): rank 0 sleeps 60 s outside any
    collective. Not hung at the 3 s hang timeout; the time limit ends it, as it ends any run, and
    the report says what held the job."""
    res = run(tmp_path, "straggler.py", "--wait-s", "60", hang_timeout=3, timeout=20)
    assert res.status == "timeout" and res.hang is not None
    assert (res.hang["kind"], res.hang["ended_by"]) == ("straggler", "time limit")
    assert [r["state"] for r in res.hang["ranks"]] == ["outside any collective", "waiting in a collective"]
    assert res.hang["ranks"][0]["doing"] == "sleeping" and res.hang["ranks"][0]["blocked_at"].endswith(
        f"straggler.py:{(FIXTURES / 'straggler.py').read_text().splitlines().index('        time.sleep(seconds)  # the line a straggler report names') + 1}")
    text = (res.run_dir / "hang.txt").read_text()
    assert text.startswith("The run's time limit ran out while no rank had made progress for ")
    assert "Not a hang: no collective was shown unable to complete" in text
    assert [ep["ended_by"] for ep in res.stalls] == ["the end of the run"]


def test_gradscaler_skipped_steps_are_iterations(tmp_path):
    res = run(tmp_path, "nan_scaler.py")
    assert res.status == "ok"
    key = rundir.load_run(res.run_dir)["key"]
    steps = [e for e in rundir.read_records(rundir.rank_dir(res.run_dir, 0) / rundir.EVENTS, key).valid
             if e["kind"] == "step"]
    assert len(steps) == 10
    assert steps[0].get("skipped") and not steps[-1].get("skipped")
    # The loss is recorded unscaled: backward ran on loss * scale, and the scale is divided out.
    skipped = [s for s in steps if s.get("skipped")]
    assert steps[0]["loss_scale"] == 2.0**20 and all(s["loss_scale"] < 2.0**20 for s in steps[1:])
    assert len({s["loss"] for s in skipped}) == 1  # the model did not change while steps were skipped
    assert 0 < skipped[0]["loss"] < 100


def test_fault_kills_a_rank_and_the_launcher_restarts_the_job(tmp_path):
    res = run(tmp_path, "ddp_ok.py", "--steps", "12", max_restarts=1, faults=[Fault(rank=1, step=5)])
    assert res.status == "ok"
    key = rundir.load_run(res.run_dir)["key"]
    obs = observe_rank(res.run_dir, 1, key)
    assert obs.attempts == 2 and obs.steps == 12 and obs.steps_total == 5 + 12


def test_fault_during_save_leaves_a_torn_file(tmp_path):
    res = run(tmp_path, "torn_save.py", faults=[Fault(rank=0, step=3, when="save")])
    assert res.status == "failed"
    with pytest.raises(Exception):  # noqa: B017 (torch raises RuntimeError or its own pickle errors)
        torch.load(tmp_path / "ckpt.pt")


def test_two_launchers_rendezvous_over_loopback(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "grader.cli", "run", str(FIXTURES / "ddp_ok.py"), "--nproc", "1",
           "--nnodes", "2", "--rdzv-endpoint", f"127.0.0.1:{port}", "--json"]
    procs = [subprocess.Popen(cmd + ["--run-dir", str(tmp_path / f"node{i}")], stdout=subprocess.PIPE,
                              cwd=tmp_path, text=True) for i in range(2)]
    outs = [json.loads(p.communicate(timeout=150)[0]) for p in procs]
    assert [o["status"] for o in outs] == ["ok", "ok"]
    assert sorted(o["ranks"][0]["rank"] for o in outs) == [0, 1]
    assert all(o["world_size"] == 2 and o["ranks"][0]["steps"] == 12 for o in outs)
    assert_nothing_left(tmp_path)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_ends_every_rank_and_records_the_run(tmp_path, sig):
    cmd = [sys.executable, "-m", "grader.cli", "run", str(FIXTURES / "slow.py"), "--json",
           "--run-dir", str(tmp_path / "run")]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path, text=True,
                            preexec_fn=ctrl_c_reaches_it)
    deadline = time.time() + 60
    events = tmp_path / "run" / "ranks" / "1" / "events.jsonl"
    while time.time() < deadline and not (events.exists() and '"step"' in events.read_text()):
        time.sleep(0.2)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert json.loads(out)["status"] == "interrupted"
    assert rundir.load_run(tmp_path / "run")["status"] == "interrupted"
    assert_nothing_left(tmp_path)


# Rank 0 only: two ranks printing to bare torchrun's one stdout can interleave ("threadsthreads 1 1").
THREADS = ("import os, torch\nif os.environ['RANK'] == '0':\n"
           "    print('threads', torch.get_num_threads(), os.environ.get('OMP_NUM_THREADS'), flush=True)\n")


@pytest.mark.parametrize("nproc", [1, 2])
def test_a_rank_gets_the_intra_op_threads_torchrun_gives_it(tmp_path, monkeypatch, nproc):
    """torchrun sets OMP_NUM_THREADS=1 only with several ranks per node: a one-rank job under the
    harness must not run on one thread where bare torchrun gives it the machine's."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    script = tmp_path / "threads.py"
    script.write_text(THREADS)
    bare = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           f"--nproc-per-node={nproc}", str(script)], capture_output=True, text=True, timeout=120)
    assert bare.returncode == 0, bare.stderr[-2000:]
    res = run(tmp_path, str(script), nproc=nproc, run_dir=tmp_path / "run")
    assert res.status == "ok"
    seen = (tmp_path / "run" / "ranks" / "0" / "stdout.log").read_text()
    want = next(line for line in bare.stdout.splitlines() if line.startswith("threads"))
    assert want in seen, (want, seen)


@pytest.mark.slow
def test_a_missing_distributed_sampler_shows_in_the_sample_accounting(tmp_path):
    """Without a DistributedSampler each rank trains on the whole dataset: the summary, read from the
    loader ledger the script never wrote to, says how many samples more than one rank fetched."""
    res = run(tmp_path, "own_data.py", "--steps", "8", "--no-sampler")
    assert res.status == "ok", res.failure
    train = next(d for d in res.samples if d["dataset"] == "Rows[64]")
    assert all(v["items"] >= 32 for v in train["ranks"].values())  # 8 steps of 4, and what workers read ahead
    assert train["shared"] >= 32  # both ranks read 0..31 at least, in the same order
