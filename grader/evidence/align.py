"""Matching two sets of parameters by the model's structure, not by the names a script gave them.

A candidate may wrap the model in a module of their own (a Lightning-style ``LitModel``, a model
that owns its loss), rename its attributes, or build optimizer parameter groups (weights with decay,
biases without) that change the order the optimizer holds them in. None of that changes the model,
and none of it may decide a verdict. ``align(a, b)`` pairs each tensor of ``a`` with one of ``b``,
trying in turn:

1. **names**, after the wrappers torch adds (``module.``, ``_orig_mod.``);
2. **names relative to the model**: the longest leading dotted prefix every name of a side shares
   is dropped on that side (``model.net.0.weight`` and ``net.0.weight`` both become ``0.weight``
   when every parameter sits under ``model.net.`` and ``net.``), then names ending alike
   (``lit.backbone.fc.weight`` against ``backbone.fc.weight``), each pairing unique;
3. **structure**: both sides hold the same multiset of shapes; within each shape, tensors pair in
   the order each side holds them (the optimizer's order, which is the module's registration order
   within a parameter group). Parameter groups split by kind (weights, biases, norms) keep every
   shape's relative order, so they pair right; a model whose same-shaped layers were registered in
   another order pairs wrongly and its values differ: that is a false fail, never a false pass,
   because the values are still compared.

When the shapes differ the model is not the same model, and ``Alignment.problem`` says how.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

WRAPPER_PREFIXES = ("module.", "_orig_mod.")  # DDP / FSDP1 wrappers, torch.compile


def strip_wrappers(name: str) -> str:
    for prefix in WRAPPER_PREFIXES:
        while name.startswith(prefix):
            name = name[len(prefix):]
    return name


@dataclass
class Alignment:
    pairs: list[tuple[str, str]] = field(default_factory=list)  # (name in a, name in b)
    how: str = "names"  # names | relative names | structure | none
    problem: str | None = None  # why no pairing exists (None: every tensor of both sides paired)
    only_first: list[str] = field(default_factory=list)
    only_second: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.problem is None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"matched_by": self.how}
        if self.problem:
            out.update(problem=self.problem, only_first=self.only_first[:5], only_second=self.only_second[:5])
        return out


def _shape(t: Any) -> tuple[int, ...]:
    return tuple(getattr(t, "shape", ()))


def _common_prefix(names: list[str]) -> str:
    """The longest dotted prefix every name shares, ending with a dot (never a whole name)."""
    if len(names) < 2:
        return names[0].rsplit(".", 1)[0] + "." if names and "." in names[0] else ""
    parts = [n.split(".")[:-1] for n in names]
    common: list[str] = []
    for level in zip(*parts):
        if len(set(level)) != 1:
            break
        common.append(level[0])
    return ".".join(common) + "." if common else ""


def _by_relative_names(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, str]] | None:
    pa, pb = _common_prefix(list(a)), _common_prefix(list(b))
    ra = {n[len(pa):]: n for n in a}
    rb = {n[len(pb):]: n for n in b}
    if set(ra) == set(rb):
        return [(ra[k], rb[k]) for k in ra]
    # names ending alike: each of a's names is b's with something in front, or the other way
    pairs, used = [], set()
    for na in a:
        hits = [nb for nb in b if na == nb or na.endswith("." + nb) or nb.endswith("." + na)]
        if len(hits) != 1 or hits[0] in used:
            return None
        used.add(hits[0])
        pairs.append((na, hits[0]))
    return pairs if len(used) == len(b) else None


def _by_structure(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, str]] | None:
    ga: dict[tuple[Any, ...], list[str]] = defaultdict(list)
    gb: dict[tuple[Any, ...], list[str]] = defaultdict(list)
    for n, t in a.items():
        ga[_shape(t)].append(n)
    for n, t in b.items():
        gb[_shape(t)].append(n)
    if {s: len(v) for s, v in ga.items()} != {s: len(v) for s, v in gb.items()}:
        return None
    return [pair for s in ga for pair in zip(ga[s], gb[s])]


def _shape_difference(a: dict[str, Any], b: dict[str, Any]) -> str:
    ca: dict[tuple[Any, ...], int] = defaultdict(int)
    cb: dict[tuple[Any, ...], int] = defaultdict(int)
    for t in a.values():
        ca[_shape(t)] += 1
    for t in b.values():
        cb[_shape(t)] += 1
    extra = [f"{n}x{list(s)}" for s, n in ((s, ca[s] - cb.get(s, 0)) for s in ca) if n > 0]
    lack = [f"{n}x{list(s)}" for s, n in ((s, cb[s] - ca.get(s, 0)) for s in cb) if n > 0]
    sa, sb = sum(ca.values()), sum(cb.values())
    return (f"{sa} tensors against {sb}; shapes only in the first: {', '.join(extra[:4]) or 'none'}; "
            f"only in the second: {', '.join(lack[:4]) or 'none'}")


def align(a: dict[str, Any], b: dict[str, Any]) -> Alignment:
    """Pair the tensors of ``a`` with those of ``b`` (name -> tensor, in the order the model or the
    optimizer holds them), by names where they agree, else by structure."""
    sa = {strip_wrappers(str(k)): v for k, v in a.items()}
    sb = {strip_wrappers(str(k)): v for k, v in b.items()}
    if len(sa) != len(a) or len(sb) != len(b):  # two names differing only by a wrapper: keep them
        sa, sb = {str(k): v for k, v in a.items()}, {str(k): v for k, v in b.items()}
    back_a = {strip_wrappers(str(k)): str(k) for k in a} if len(sa) == len(a) else {str(k): str(k) for k in a}
    back_b = {strip_wrappers(str(k)): str(k) for k in b} if len(sb) == len(b) else {str(k): str(k) for k in b}

    def out(pairs: list[tuple[str, str]], how: str) -> Alignment | None:
        if all(_shape(sa[x]) == _shape(sb[y]) for x, y in pairs):
            return Alignment([(back_a[x], back_b[y]) for x, y in pairs], how)
        return None

    if set(sa) == set(sb):
        found = out([(n, n) for n in sa], "names")
        if found:
            return found
    if len(sa) == len(sb):
        rel = _by_relative_names(sa, sb)
        found = out(rel, "relative names") if rel else None
        if found:
            return found
        structural = _by_structure(sa, sb)
        if structural:
            return Alignment([(back_a[x], back_b[y]) for x, y in structural], "structure")
    return Alignment([], "none", f"the two models differ in structure: {_shape_difference(sa, sb)}",
                     only_first=sorted(set(sa) - set(sb)), only_second=sorted(set(sb) - set(sa)))


def aligned(a: dict[str, Any], b: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], Alignment]:
    """``a`` renamed to ``b``'s names (only the paired tensors), ``b`` as it is, and the alignment."""
    al = align(a, b)
    if not al.ok:
        return a, b, al
    return {y: a[x] for x, y in al.pairs}, dict(b), al
