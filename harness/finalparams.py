"""Final parameters as the grader should compare them: whole tensors, whatever the sharding.

Each rank's bootstrap saves the parameters it holds (``final_params.safetensors``). A DTensor parameter
(FSDP2's ``fully_shard``, tensor parallel) is saved as the rank's local shard, and the signed exit
record says, per sharded name, the global shape and where the shard sits (``shards``). ``full``
puts those shards back together from every rank's file, so that a sharded run compares with a
replicated one (DDP, the reference) like with like. Needs torch (the grader's parameter checks do).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness import rundir
from harness.observe import RankObservation, observe_rank


class ShardError(Exception):
    """The shards cannot be put back together (a rank's file is missing, or a placement is not a block)."""


def load_rank(run_dir: Path | str, obs: RankObservation) -> dict[str, Any] | None:
    """One rank's saved parameters (its shards as they are), or None when absent or not the file
    its signed exit record vouches for."""
    path = rundir.rank_dir(run_dir, obs.rank) / rundir.FINAL_PARAMS
    if not obs.params_sha256 or not path.exists() or rundir.sha256_file(path) != obs.params_sha256:
        return None
    try:
        return rundir.load_params(path)
    except ValueError:
        return None


def full(run_dir: Path | str, key: str | None) -> dict[int, dict[str, Any]]:
    """Per rank, its parameters with every sharded one replaced by the whole tensor assembled from
    all ranks' shards. Ranks whose file is missing or altered are left out; a sharded name whose
    shards cannot all be found raises ``ShardError`` naming it."""
    import torch

    obs = {r: observe_rank(Path(run_dir), r, key) for r in rundir.ranks_in(run_dir)}
    saved = {r: p for r, o in obs.items() if (p := load_rank(run_dir, o)) is not None}
    sharded = {name for o in obs.values() for name in (o.shards or {})}
    whole: dict[str, Any] = {}
    for name in sorted(sharded):
        pieces = [(saved[r][name], shards[name]) for r in sorted(saved)
                  if name in saved[r] and (shards := obs[r].shards) and name in shards]
        if not pieces:
            continue
        meta = pieces[0][1]
        if not all(m.get("placeable") and m.get("offset") is not None for _, m in pieces):
            raise ShardError(f"{name}: placements {meta.get('placements')} are not plain blocks; "
                             "compare the shards rank by rank instead")
        out = torch.zeros(meta["shape"], dtype=pieces[0][0].dtype)
        filled = torch.zeros(meta["shape"], dtype=torch.bool)
        for t, m in pieces:
            index = tuple(slice(o, o + n) for o, n in zip(m["offset"], t.shape))
            out[index] = t
            filled[index] = True
        if not bool(filled.all()):
            raise ShardError(f"{name}: the saved shards cover {int(filled.sum())} of {filled.numel()} "
                             "elements; a rank's final parameters are missing")
        whole[name] = out
    return {r: {**p, **{n: whole[n] for n in p if n in whole}} for r, p in saved.items()}
