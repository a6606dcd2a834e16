"""The rewrite library: semantics-preserving changes of a reference fix, each of which must pass.

``REWRITES`` is in composition order: what reads the script's anchors (the loader, the step, the
checkpoint dicts, main's top-level statements) comes before what renames or restructures them, so
``compose`` can apply every rewrite that still applies, one after the other, to one script."""

from __future__ import annotations

import ast

from grader.validity.rewrites.base import Rewrite
from grader.validity.rewrites.checkpoint import (
    CheckpointKeys,
    CheckpointNested,
    CheckpointRng,
    DdpStateDict,
    SaveViaBytes,
    WriteFromProcess,
    WriteFromThread,
)
from grader.validity.rewrites.data import EvalWorkers, HandWrittenSampler, LoaderWorkers, MicroBatches
from grader.validity.rewrites.naming import Logging, Pathlib, RenameAttributes, RenameHelpers, RenameLocals
from grader.validity.rewrites.optim import Bf16Wire, BucketView, Fp16Wire, InferenceMode, ParamGroups, ZeroGradByHand
from grader.validity.rewrites.structure import (
    ConfigDataclass,
    ModelBeforeData,
    StepFunction,
    TrainerClass,
    WhileLoop,
    WrapModel,
)

REWRITES: list[Rewrite] = [
    LoaderWorkers(), EvalWorkers(), HandWrittenSampler(), MicroBatches(), ZeroGradByHand(), ParamGroups(),
    BucketView(), Fp16Wire(), Bf16Wire(), InferenceMode(),
    CheckpointRng(), CheckpointKeys(), CheckpointNested(), DdpStateDict(), SaveViaBytes(), WriteFromThread(),
    WriteFromProcess(),
    Pathlib(), Logging(), WrapModel(), ModelBeforeData(), StepFunction(), WhileLoop(), ConfigDataclass(),
    RenameAttributes(), RenameHelpers(), RenameLocals(), TrainerClass(),
]
BY_NAME = {r.name: r for r in REWRITES}


def compose(tree: ast.Module, names: list[str]) -> tuple[ast.Module, list[str]]:
    """Every rewrite of ``names`` that still applies, in library order, one after the other (of two
    that conflict, the first); the tree and the rewrites applied."""
    done: list[str] = []
    for r in REWRITES:
        if r.name not in names or any(c in done for c in r.conflicts):
            continue
        if r.applies(tree):
            tree = r.apply(tree)
            done.append(r.name)
    return tree, done


__all__ = ["BY_NAME", "REWRITES", "Rewrite", "compose"]
