"""The mutation library, without launching anything: every mutant parses, is another program than
the reference, binds every name it reads, and changes what its family says; the diff families
are pinned on a small fix written out here."""

from __future__ import annotations

import ast
from functools import cache

import pytest

from grader.validity.mutations import MUTATIONS, Fix, generate
from grader.validity.mutations.base import problem
from grader.validity.mutations.diff import revert_groups
from grader.validity.source import bodies, calls, is_call, kwarg, parse, program_key, train_loop, undefined
from tests.grader.validity.scripts import SLUGS, broken, foreign_imports, reference


@cache
def _generated(slug: str):
    return generate(Fix(broken(slug), reference(slug)))


@cache
def _key(source: str) -> str:
    """``program_key`` of a script, once per worker: the checks below compare each mutant with the
    reference and the broken script, and with every other mutant (about 25 ms a key on 2 cores)."""
    return program_key(source)


def _mutant(slug: str, name: str):
    return next(m for m in _generated(slug)[0] if m.name == name)


# by exercise, known without generating (every exercise's mutants, generated at collection, cost
# each pytest-xdist worker about 4 s before its first test); a failure names the mutant
@pytest.mark.parametrize("slug", SLUGS)
def test_every_mutant_is_another_program_that_runs_its_names(slug):
    mutants = _generated(slug)[0]
    assert mutants
    for m in mutants:
        _is_another_program_that_runs_its_names(slug, m)


def _is_another_program_that_runs_its_names(slug, m):
    name = m.name
    tree = parse(m.source)
    compile(m.source, f"{slug}/{name}", "exec")
    assert _key(m.source) != _key(reference(slug)), f"{name}: the mutant is the reference again"
    assert _key(m.source) != _key(broken(slug)), f"{name}: the mutant is the broken script"
    assert not undefined(tree) and not foreign_imports(tree), name
    assert m.detail and m.family in {f.name for f in MUTATIONS}, name
    if m.family == "rank0-only":
        assert any(isinstance(n, ast.If) and "dist.get_rank() == 0" in ast.unparse(n.test) for n in ast.walk(tree))
    if m.family == "first-epoch-only":
        assert any(isinstance(n, ast.If) and ast.unparse(n.test).startswith("epoch == ") for n in ast.walk(tree))
    if m.family == "catch-timeout":
        assert any(isinstance(n, ast.Try) and any(is_call(c, "save_checkpoint", "save_final_checkpoint")
                                                  for c in ast.walk(n)) for n in ast.walk(tree))


@pytest.mark.parametrize("slug", SLUGS)
def test_mutants_are_distinct_programs(slug):
    keys = [_key(m.source) for m in _generated(slug)[0]]
    assert len(keys) == len(set(keys))


def test_the_targeted_mutations_change_the_mechanism_they_name():
    amp = {m.name: parse(m.source) for m in _generated("amp-no-scaler")[0]}
    static = amp["static-loss-scale"]
    assert not calls(static, "scaler.step", "scaler.update", "scaler.scale", "scaler.unscale_")
    assert calls(static, "optimizer.step")
    clip = amp["clip-before-unscale"]
    body = next(n.body for n in ast.walk(clip) if isinstance(n, ast.For) and calls(n, "scaler.unscale_")
                and any(isinstance(s, ast.Expr) and is_call(s.value, "scaler.unscale_") for s in n.body))
    order = [ast.unparse(s) for s in body]
    assert next(i for i, s in enumerate(order) if "clip_grad_norm_" in s) < next(
        i for i, s in enumerate(order) if "unscale_" in s)
    live = parse(_mutant("periodic-stall", "live-snapshot").source)
    assert not any(k.arg == "copy" for c in calls(live, ".to") for k in c.keywords)
    ref_loop = train_loop(parse(reference("periodic-stall")))
    assert calls(ref_loop, "writer.submit") and not calls(ref_loop, "writer.wait", "writer._write")
    waits = train_loop(parse(_mutant("periodic-stall", "wait-in-loop").source))
    follows = [(ast.unparse(a), ast.unparse(b)) for body in bodies(waits) for a, b in zip(body, body[1:])]
    assert any(a.startswith("writer.submit(") and b == "writer.wait()" for a, b in follows)
    writes = train_loop(parse(_mutant("periodic-stall", "write-in-loop").source))
    assert calls(writes, "writer._write") and not calls(writes, "writer.submit")
    each = parse(_mutant("slow-input-pipeline", "collate-per-record").source)
    (loader,) = calls(each, "DataLoader")
    assert ast.unparse(kwarg(loader, "collate_fn")) == "collate_each(SpectralCollate())"
    def collate(tree):
        return next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "SpectralCollate")
    flat = parse(_mutant("slow-input-pipeline", "drop-transpose").source)
    assert not calls(collate(flat), ".transpose") and calls(collate(parse(reference("slow-input-pipeline"))),
                                                             ".transpose")
    # the fix deleted the per-record dataset; the rank that keeps the bug gets it back, definitions and all
    one = _mutant("slow-input-pipeline", "rank0-only-hunk-3")
    assert "SpectralDataset" in one.detail and "taken back" in one.detail
    guard = next(n for n in ast.walk(parse(one.source)) if isinstance(n, ast.If) and "get_rank" in ast.unparse(n.test))
    assert "SpectralCollate()" in ast.unparse(guard.body[0]) and "SpectralDataset(" in ast.unparse(guard.orelse[0])
    assert not undefined(parse(one.source))
    # grad-accumulation's collate is the broken script's own, not the fix's mechanism
    assert "collate-per-record" not in {m.name for m in _generated("grad-accumulation")[0]}


BROKEN = """\
import torch.distributed as dist


def main():
    total = 0
    for epoch in range(3):
        total = total + epoch
        print(total)
"""

FIXED = """\
import torch.distributed as dist

SCALE = 2


def main():
    total = 0
    for epoch in range(3):
        total = total + epoch * SCALE
        dist.barrier()
        print(total)
"""


def test_reverting_a_hunk_takes_in_the_hunks_it_cannot_run_without():
    fix = Fix(BROKEN, FIXED)
    assert len(fix.hunks) == 2
    groups = {h.index: [k.index for k in g] for h, g in revert_groups(fix)}
    assert groups == {1: [1, 2], 2: [2]}  # SCALE's definition goes only with its use
    reverted = fix.revert([fix.hunks[1]])
    assert "epoch * SCALE" not in reverted and "dist.barrier" not in reverted and "SCALE = 2" in reverted


def test_the_guarded_families_put_the_fix_on_one_branch_and_the_bug_on_the_other():
    made, _ = generate(Fix(BROKEN, FIXED))
    names = {m.name: m for m in made}
    rank0 = parse(names["rank0-only-hunk-2"].source)
    guard = next(n for n in ast.walk(rank0) if isinstance(n, ast.If))
    assert "SCALE" in ast.unparse(guard.body[0]) and "SCALE" not in ast.unparse(guard.orelse[0])
    first = parse(names["first-epoch-only-hunk-2"].source)
    assert any(isinstance(n, ast.If) and ast.unparse(n.test) == "epoch == 0" for n in ast.walk(first))
    drop = parse(names["drop-line-10"].source)
    assert not calls(drop, "dist.barrier")


@pytest.mark.parametrize("source, says", [
    ("def main(:\n", "does not parse"),
    (FIXED + "\n# a comment\n", "the same program as the reference"),
    (FIXED.replace("def main():", "def main() -> None:"), "the same program as the reference"),
    (FIXED.replace("SCALE = 2\n", ""), "leaves SCALE undefined"),
])
def test_a_mutant_that_is_no_partial_fix_is_left_out_with_why(source, says):
    assert says in problem(source, Fix(BROKEN, FIXED))


@pytest.mark.parametrize("source, unbound", [
    ("def a():\n    t = 1\n\ndef b():\n    return t\n", {"t"}),  # another function's local
    ("class K:\n    y = 2\n\n    def m(self):\n        return y\n", {"y"}),  # a class body is no enclosing scope
    ("def a():\n    t = 1\n\n    def b():\n        return t\n    return b\n", set()),  # an enclosing function's
    ("def a():\n    global G\n    G = 1\n\ndef b():\n    return G\n", set()),  # bound at module level from a function
    ("import os\n\ndef a(x: os.PathLike, n=N) -> None:\n    return [x for _ in range(n)]\n", {"N"}),
    ("@register\ndef a():\n    return [k for k in range(3)] + [v for _, v in {}.items()]\n", {"register"}),
    ("try:\n    pass\nexcept OSError as e:\n    print(e)\nf = lambda x, y=Z: x + y\n", {"Z"}),
])
def test_a_name_is_unbound_where_no_scope_that_sees_it_binds_it(source, unbound):
    """Python's scopes, not the module's names pooled: slow-input-pipeline's drop-line-94 read a
    ``t`` only another class's method bound, and passed the pooled filter as if it were bound."""
    assert undefined(parse(source)) == unbound
