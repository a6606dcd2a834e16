"""The mutation library: property-breaking changes of a reference fix, each of which must fail
with a reason naming the property. ``generate`` runs every family over one exercise's fix and keeps
one mutant per distinct program (a drop that equals a revert is listed as the same)."""

from __future__ import annotations

from functools import lru_cache

from grader.validity.mutations.base import Fix, Mutant, Mutation, Skipped, canonical
from grader.validity.mutations.diff import CatchTimeout, DropLine, FirstEpochOnly, Rank0Only, RevertHunk
from grader.validity.mutations.targeted import (
    ClipBeforeUnscale,
    CollatePerRecord,
    DropTranspose,
    LiveSnapshot,
    StaticLossScale,
    WaitInLoop,
    WriteInLoop,
)

MUTATIONS: list[Mutation] = [RevertHunk(), DropLine(), Rank0Only(), FirstEpochOnly(), CatchTimeout(),
                             StaticLossScale(), ClipBeforeUnscale(), LiveSnapshot(), WaitInLoop(),
                             WriteInLoop(), CollatePerRecord(), DropTranspose()]
BY_NAME = {m.name: m for m in MUTATIONS}


def generate(fix: Fix) -> tuple[list[Mutant], list[Skipped]]:
    """Every family's mutants of ``fix``, one per distinct program (a mutant another family made
    already is skipped, naming it). Cached by the two scripts' text: listing, building and the tests
    ask again for the same fix, and generating costs seconds."""
    made, skipped = _generate(fix.broken, fix.ref)
    return list(made), list(skipped)


@lru_cache(maxsize=32)
def _generate(broken: str, ref: str) -> tuple[tuple[Mutant, ...], tuple[Skipped, ...]]:
    fix = Fix(broken, ref)
    out: list[Mutant] = []
    skipped: list[Skipped] = []
    seen: dict[str, str] = {}
    for family in MUTATIONS:
        made, left = family.generate(fix)
        skipped += left
        for m in made:
            key = canonical(m.source)
            if key in seen:
                if seen[key] != m.name:
                    skipped.append(Skipped(m.name, f"the same program as {seen[key]}"))
                continue
            seen[key] = m.name
            out.append(m)
    return tuple(out), tuple(skipped)


__all__ = ["BY_NAME", "MUTATIONS", "Fix", "Mutant", "Mutation", "Skipped", "generate"]
