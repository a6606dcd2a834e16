"""The shapes of real-world scripts (nanoGPT, the pytorch/examples DDP tutorial and FSDP2 example),
as small fixtures, run through ``trainwreck run`` the way a new user would: each test asserts what
the user sees (the summary, run.json, the run dir's traces)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import torch

from harness import finalparams, rundir
from tests.conftest import FIXTURES, assert_nothing_left
from tests.harness.test_cli import tw

pytestmark = pytest.mark.slow


def records(run_dir: Path, rank: int, name: str = rundir.EVENTS) -> list[dict]:
    key = rundir.load_run(run_dir)["key"]
    return rundir.read_records(rundir.rank_dir(run_dir, rank) / name, key).valid


def test_a_long_rank0_evaluation_is_not_a_hang(tmp_path):
    """nanoGPT's shape: rank 0 evaluates alone for 7 s while rank 1 waits in DDP's all-reduce; no
    rank writes a record for longer than the 3 s hang timeout, but rank 0 is using CPU."""
    run_dir = tmp_path / "r"
    p = tw("run", str(FIXTURES / "rank0_eval.py"), "--hang-timeout", "3", "--json", "--run-dir", str(run_dir),
           "--", "--eval-s", "7", cwd=tmp_path)
    out = json.loads(p.stdout)
    assert p.returncode == 0 and out["status"] == "ok" and out["hang"] is None, out
    assert [r["steps"] for r in out["ranks"]] == [6, 6]
    times = sorted(r["t"] for rank in (0, 1) for name in (rundir.EVENTS, rundir.COLLECTIVES)
                   for r in records(run_dir, rank, name))
    quiet = max(b - a for a, b in zip(times, times[1:]))
    assert quiet >= 6.0, quiet  # twice the hang timeout without a record from any rank
    assert "evaluated" in (rundir.rank_dir(run_dir, 0) / rundir.STDOUT).read_text()
    assert_nothing_left(tmp_path)


def test_a_deadlock_after_a_long_evaluation_says_who_waited_while_who_worked(tmp_path):
    """The same evaluation, then a rank-0-only barrier: hung once rank 0 stops working, and the
    report says rank 1 was waiting in DDP's all-reduce while rank 0 was still working."""
    run_dir = tmp_path / "r"
    p = tw("run", str(FIXTURES / "rank0_eval.py"), "--hang-timeout", "3", "--json", "--run-dir", str(run_dir),
           "--", "--eval-s", "5", "--then-barrier", cwd=tmp_path)
    h = json.loads(p.stdout)["hang"]
    assert p.returncode == 1 and h is not None
    r0, r1 = h["ranks"]
    assert (r0["pending_collective"]["op"], r0["blocked_at"].rsplit("/", 1)[-1]) == ("barrier", "rank0_eval.py:42")
    assert (r1["pending_collective"]["op"], r1["pending_collective"]["by"]) == ("all_reduce", "backward")
    assert r1["pending_collective"]["waiting_s"] > r0["busy_s_ago"] + 3  # rank 1 waited through the evaluation
    assert len(h["story"]) == 1 and h["story"][0].startswith("rank 1 was waiting in all_reduce #")
    assert "while rank 0 (busy until" in h["story"][0]
    assert h["story"][0] in (run_dir / "hang.txt").read_text()
    # hung the hang timeout after rank 0's last busy reading, plus a sample interval or so
    assert h["detected_at"] - h["last_progress_at"] <= 3 + 2
    assert_nothing_left(tmp_path)


def test_a_config_file_is_read_from_the_launch_directory(tmp_path):
    """nanoGPT's ``exec(open('configurator.py').read())``: relative to where the user launched."""
    (tmp_path / "configurator.py").write_text("steps = 5\n")
    p = tw("run", str(FIXTURES / "launch_dir_config.py"), "--run-dir", str(tmp_path / "r"), cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"script ran in: {tmp_path}" in p.stdout
    run = rundir.load_run(tmp_path / "r")
    assert run["cwd"] == str(tmp_path) and [r["steps"] for r in run["ranks"]] == [5, 5]
    assert "trained 5 steps" in (tmp_path / "r" / "ranks" / "0" / rundir.STDOUT).read_text()
    assert_nothing_left(tmp_path)


def test_a_snapshot_is_resumed_across_two_runs_from_the_same_directory(tmp_path):
    """The DDP tutorial's ``snapshot.pt``: written by the first run in the launch directory (not in
    the run dir), found and loaded by the second."""
    first = tw("run", str(FIXTURES / "snapshot_resume.py"), "--json", "--run-dir", str(tmp_path / "r1"),
               "--", "--epochs", "4", "--stop-after", "2", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert [r["steps"] for r in json.loads(first.stdout)["ranks"]] == [6, 6]
    assert (tmp_path / "snapshot.pt").is_file() and not list((tmp_path / "r1").rglob("snapshot.pt"))
    second = tw("run", str(FIXTURES / "snapshot_resume.py"), "--json", "--run-dir", str(tmp_path / "r2"),
                "--", "--epochs", "4", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    assert [r["steps"] for r in json.loads(second.stdout)["ranks"]] == [6, 6]  # epochs 3 and 4 only
    for rank in (0, 1):
        assert "Resuming training from snapshot at Epoch 2" in \
            (tmp_path / "r2" / "ranks" / str(rank) / rundir.STDOUT).read_text()
        loads = [r for r in records(tmp_path / "r2", rank, rundir.SAVES) if r.get("op") == "load"]
        assert loads and loads[0]["path"] == str(tmp_path / "snapshot.pt")
    # Its own dataset, accounted from outside: epochs 3 and 4, each rank half of the 24 in each; the
    # sampler reshuffles each epoch (set_epoch), so over the two a rank read more than its half once
    (samples,) = json.loads(second.stdout)["samples"]
    assert (samples["dataset"], samples["kind"], samples["distinct"]) == ("MyTrainDataset[24]", "map", 24)
    assert [v["items"] for v in samples["ranks"].values()] == [24, 24]
    assert all(12 < v["distinct"] <= 24 for v in samples["ranks"].values())
    assert_nothing_left(tmp_path)


def test_batches_a_script_makes_itself_are_said_to_be_unobserved(tmp_path):
    """nanoGPT's shape: batches drawn by the script itself (its ``get_batch``), no DataLoader; the
    summary says what it could not see instead of showing nothing."""
    p = tw("run", str(FIXTURES / "rank0_eval.py"), "--run-dir", str(tmp_path / "r"), "--", "--eval-s", "0",
           cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "no DataLoader fetched anything" in " ".join(p.stdout.split())
    assert_nothing_left(tmp_path)


def ddp_ok_replay(steps: int) -> dict[str, torch.Tensor]:
    """ddp_ok.py's (and fsdp2.py's) training in one process: gradients averaged over the two
    ranks' batches, as DDP and FSDP2 both do."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gens = [torch.Generator().manual_seed(r) for r in (0, 1)]
    for _ in range(steps):
        loss = sum(model(torch.randn(8, 16, generator=g)).pow(2).mean() for g in gens) / 2
        opt.zero_grad()
        loss.backward()
        opt.step()
    return {k: v.detach() for k, v in model.state_dict().items()}


@pytest.fixture(scope="module")
def fsdp2_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fsdp2")
    p = tw("run", str(FIXTURES / "fsdp2.py"), "--profile", "--json", "--run-dir", str(tmp / "r"),
           "--", "--steps", "12", cwd=tmp)
    assert p.returncode == 0, p.stderr
    assert_nothing_left(tmp)
    return tmp / "r", json.loads(p.stdout)


def test_fsdp2_collectives_are_traced_with_their_ops(fsdp2_run):
    run_dir, out = fsdp2_run
    assert [r["steps"] for r in out["ranks"]] == [12, 12]
    for rank in (0, 1):
        recs = records(run_dir, rank, rundir.COLLECTIVES)
        enters = [r for r in recs if r["ph"] == "enter"]
        assert {r["seq"] for r in enters} == {r["seq"] for r in recs if r["ph"] == "exit"}
        ops = Counter((r["op"], r["api"], r["by"]) for r in enters)
        # two sharded layers: an all-gather per layer in forward and again in backward, a
        # reduce-scatter of the gradients per layer in backward
        assert ops == {("all_gather_single", "all_gather_single", "fsdp"): 12 * 4,
                       ("reduce_scatter_single", "reduce_scatter_single", "fsdp"): 12 * 2}
        assert {r["site"].rsplit("/", 1)[-1] for r in enters} == {"fsdp2.py:31", "fsdp2.py:33"}  # forward, backward


def test_fsdp2_profile_counts_its_communication_as_sync(fsdp2_run):
    _, out = fsdp2_run
    for r in out["profile"]["ranks"]:
        assert r["phases"]["sync"]["share"] > 0 and r["phases"]["sync"]["mean_ms"] > 0, r["phases"]
    assert any("FSDP2" in n for n in out["profile"]["notes"])


def test_fsdp2_final_params_are_shards_put_back_whole(fsdp2_run):
    run_dir, _ = fsdp2_run
    key = rundir.load_run(run_dir)["key"]
    exits = {r: next(e for e in records(run_dir, r) if e["kind"] == "exit") for r in (0, 1)}
    for e in exits.values():
        assert e["numel"] == 577 and set(e["shards"]) == {"0.weight", "0.bias", "2.weight", "2.bias"}
    assert exits[0]["local_numel"] + exits[1]["local_numel"] == 577  # each rank saved its own half
    whole = finalparams.full(run_dir, key)
    expected = ddp_ok_replay(12)
    for rank in (0, 1):
        assert set(whole[rank]) == set(expected)
        for name, v in expected.items():
            torch.testing.assert_close(whole[rank][name], v, rtol=1e-5, atol=1e-6)


def test_dtensor_collectives_are_traced_with_their_ops(tmp_path):
    p = tw("run", str(FIXTURES / "dtensor.py"), "--json", "--run-dir", str(tmp_path / "r"), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    for rank in (0, 1):
        recs = records(tmp_path / "r", rank, rundir.COLLECTIVES)
        enters = [r for r in recs if r["ph"] == "enter"]
        assert {r["seq"] for r in enters} == {r["seq"] for r in recs if r["ph"] == "exit"}
        ops = Counter((r["op"], r["api"], r["by"]) for r in enters)
        # the batch scattered from rank 0 each step, the weight's partial gradient all-reduced by
        # DTensor's redistribution (a functional collective), the weight broadcast once at set-up
        assert ops[("scatter", "scatter", "dtensor")] == 6
        assert ops[("all_reduce", "funcol.all_reduce", "dtensor")] == 6
        assert ops[("broadcast", "broadcast", "dtensor")] == 1
        steps = [r for r in records(tmp_path / "r", rank) if r["kind"] == "step"]
        assert len(steps) == 6 and "loss" not in steps[0]  # a partial DTensor loss is not read (it would take a collective)
    assert_nothing_left(tmp_path)
