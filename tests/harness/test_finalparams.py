"""Putting sharded final parameters back together from each rank's file and signed exit record
(hand-written run dirs; the FSDP2 run in test_real_world.py does it for real)."""

from __future__ import annotations

import pytest
import torch

from harness import finalparams, rundir

KEY = "k" * 32
W = torch.arange(12.0).reshape(4, 3)


def write_rank(run_dir, rank, state, shards=None, sha=None):
    rdir = rundir.rank_dir(run_dir, rank)
    rdir.mkdir(parents=True, exist_ok=True)
    rundir.save_params(state, rdir / rundir.FINAL_PARAMS)
    rec = {"kind": "exit", "attempt": 0, "t": 1.0, "status": "ok", "code": 0,
           "numel": 14, "params_sha256": sha or rundir.sha256_file(rdir / rundir.FINAL_PARAMS)}
    if shards:
        rec["shards"] = shards
    rundir.RecordWriter(rdir / rundir.EVENTS, KEY).write(rec)


def shard(offset):
    return {"shape": [4, 3], "offset": offset, "placements": ["S(0)"], "placeable": True}


def test_shards_are_put_back_whole_and_replicated_params_kept(tmp_path):
    b = torch.tensor([1.0, 2.0])
    write_rank(tmp_path, 0, {"w": W[:2], "b": b}, {"w": shard([0, 0])})
    write_rank(tmp_path, 1, {"w": W[2:], "b": b}, {"w": shard([2, 0])})
    out = finalparams.full(tmp_path, KEY)
    for r in (0, 1):
        assert torch.equal(out[r]["w"], W) and torch.equal(out[r]["b"], b)


@pytest.mark.parametrize("second, says", [
    (None, "cover 6 of 12 elements"),  # rank 1's file is gone
    ("altered", "cover 6 of 12 elements"),  # rank 1's file is not the one its exit record vouches for
])
def test_missing_shards_are_named(tmp_path, second, says):
    write_rank(tmp_path, 0, {"w": W[:2]}, {"w": shard([0, 0])})
    if second == "altered":
        write_rank(tmp_path, 1, {"w": W[2:]}, {"w": shard([2, 0])}, sha="0" * 64)
    with pytest.raises(finalparams.ShardError, match=says):
        finalparams.full(tmp_path, KEY)


def test_a_placement_that_is_not_a_block_is_refused(tmp_path):
    strided = {**shard([0, 0]), "placements": ["_StridedShard(dim=0, sf=2)"], "placeable": False}
    write_rank(tmp_path, 0, {"w": W[:2]}, {"w": strided})
    with pytest.raises(finalparams.ShardError, match="not plain blocks"):
        finalparams.full(tmp_path, KEY)
