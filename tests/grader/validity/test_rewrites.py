"""The rewrite library, without launching anything: every rewrite applies to the references it
claims, its result parses, compiles, imports only torch, the standard library and the kit's
workloads, and changes the code in the way its name says (checked on the tree, and where the claim
is about runtime behaviour, by running the piece it adds)."""

from __future__ import annotations

import ast

import pytest
import torch
from torch.utils.data import DistributedSampler

from grader.validity.rewrites import BY_NAME, REWRITES, compose
from grader.validity.rewrites.naming import LOCALS
from grader.validity.source import (
    calls,
    checkpoint_dicts,
    ddp_assign,
    dotted,
    is_call,
    kwarg,
    loaded_checkpoints,
    main_fn,
    optimizer_assign,
    render,
    step_stmt,
    stored,
    train_loader,
    train_loop,
    undefined,
)
from tests.grader.validity.scripts import SLUGS, foreign_imports, tree

# at collection, in every pytest-xdist worker: one parse per script, not one per rewrite (applies()
# only reads its tree; that apply() leaves its tree as it was is asserted below)
APPLIES = [(s, r.name) for s, t in ((s, tree(s)) for s in SLUGS) for r in REWRITES if r.applies(t)]


def _attr_names(t: ast.AST) -> set[str]:
    return {n.attr for n in ast.walk(t) if isinstance(n, ast.Attribute)}


def _defs(t: ast.Module) -> set[str]:
    return {s.name for s in t.body if isinstance(s, (ast.FunctionDef, ast.ClassDef))}


def _class(t: ast.Module, has: str) -> ast.ClassDef | None:
    return next((c for c in t.body if isinstance(c, ast.ClassDef)
                 and any(isinstance(f, ast.FunctionDef) and f.name == has for f in c.body)), None)


def _ckpt_keys(t: ast.Module) -> set[str]:
    return {k.value for d in checkpoint_dicts(t) for k in d.keys}


def _reads(t: ast.Module) -> list[ast.Subscript]:
    loads = loaded_checkpoints(t)
    return [n for n in ast.walk(t) if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant)
            and isinstance(n.slice.value, str) and (
                (isinstance(n.value, ast.Name) and n.value.id in loads)
                or (isinstance(n.value, ast.Subscript) and isinstance(n.value.value, ast.Name)
                    and n.value.value.id in loads))]


def _top_level_saves(t: ast.Module) -> list[ast.Call]:
    main = main_fn(t)
    return [c for c in calls(main, "torch.save")] if main else []


def _wrapped(before, after) -> bool:
    # the container is the class with a forward that the rewrite added (a script may define several)
    known = {c.name for c in before.body if isinstance(c, ast.ClassDef)}
    cls = next(c for c in after.body if isinstance(c, ast.ClassDef) and c.name not in known
               and any(isinstance(f, ast.FunctionDef) and f.name == "forward" for f in c.body))
    init = next(f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__")
    sets_inner = any(isinstance(n, ast.Attribute) and n.attr == "inner" and isinstance(n.ctx, ast.Store)
                     for n in ast.walk(init))
    wraps = any(isinstance(s, ast.Assign) and is_call(s.value, cls.name) and dotted(s.value.args[0]) == "model"
                for s in main_fn(after).body)
    return sets_inner and wraps


def _micro(before, after) -> bool:
    loop = train_loop(after)
    inner = [n for n in loop.body if isinstance(n, ast.For) and any(is_call(c, ".backward") for c in ast.walk(n))]
    no_sync = bool(calls(after, ".no_sync")) if ddp_assign(before) else True
    return bool(inner) and any(is_call(c, ".chunk") for c in ast.walk(loop)) and no_sync


def _model_first(before, after) -> bool:
    body = main_fn(after).body
    model = next(i for i, s in enumerate(body) if isinstance(s, ast.Assign) and "model" in stored(s))
    data = next(i for i, s in enumerate(body) if any(is_call(c, "DataLoader") for c in ast.walk(s)))
    return model < data


def _step_fn(before, after) -> bool:
    step = step_stmt(after)
    fns = [f for f in ast.walk(main_fn(after)) if isinstance(f, ast.FunctionDef) and f.name != "main"]
    return any(any(n is step for n in ast.walk(f)) and any(isinstance(n, ast.Nonlocal) for n in f.body)
               for f in fns)


def _while(before, after) -> bool:
    return any(isinstance(w, ast.While) and isinstance(w.body[0], ast.Try)
               and any(is_call(c, "next") for c in ast.walk(w.body[0]))
               and dotted(w.body[0].handlers[0].type) == "StopIteration" for w in ast.walk(after))


def _config(before, after) -> bool:
    consts = [s for s in after.body if isinstance(s, ast.Assign) and isinstance(s.targets[0], ast.Name)
              and s.targets[0].id.isupper() and s.targets[0].id != "CFG"]
    dc = any(isinstance(c, ast.ClassDef) and any(dotted(d.func if isinstance(d, ast.Call) else d) == "dataclasses.dataclass"
                                                for d in c.decorator_list) for c in after.body)
    return dc and not consts and any(isinstance(n, ast.Attribute) and dotted(n.value) == "CFG" for n in ast.walk(after))


def _attrs_renamed(before, after) -> bool:
    def own(t):
        return {a.attr for c in t.body if isinstance(c, ast.ClassDef) for a in ast.walk(c)
                if isinstance(a, ast.Attribute) and isinstance(a.ctx, ast.Store) and dotted(a.value) == "self"}
    gone = own(before) - own(after)
    return bool(gone) and not gone & _attr_names(after)


def _locals_renamed(before, after) -> bool:
    was = stored(main_fn(before)) & set(LOCALS)
    return bool(was) and not was & stored(main_fn(after))


def _trainer(before, after) -> bool:
    main = main_fn(after)
    cls = _class(after, "run")
    return (len(main.body) == 1 and is_call(main.body[0].value, ".run") and cls is not None
            and any(dotted(n.value) == "self" for n in ast.walk(cls) if isinstance(n, ast.Attribute)))


def _rng(before, after) -> bool:
    saved = all(any(k.value == "rng" and calls(v, "random.getstate") and calls(v, "torch.get_rng_state")
                    for k, v in zip(d.keys, d.values)) for d in checkpoint_dicts(after))
    restored = not loaded_checkpoints(before) or (calls(after, "random.setstate") and calls(after, "torch.set_rng_state"))
    return saved and bool(restored)


def _keys(before, after) -> bool:
    new = _ckpt_keys(after)
    return not new & _ckpt_keys(before) and all(r.slice.value in new for r in _reads(after))


def _outer_ckpts(t: ast.Module) -> list[ast.Dict]:
    """Dict literals holding a state_dict somewhere inside, not inside another such dict."""
    holding = [d for d in ast.walk(t) if isinstance(d, ast.Dict) and d.keys and calls(d, ".state_dict")]
    return [d for d in holding if not any(o is not d and any(x is d for x in ast.walk(o)) for o in holding)]


def _nested(before, after) -> bool:
    outer = {k.value for d in _outer_ckpts(after) for k in d.keys}
    return outer <= {"state", "progress"} and all(
        isinstance(r.value, ast.Subscript) for r in _reads(after) if r.slice.value not in ("state", "progress"))


def _ddp_state(before, after) -> bool:
    ddp = ddp_assign(after)[0]
    return not calls(main_fn(after), "raw_model.state_dict") and bool(calls(after, f"{ddp}.state_dict"))


def _bytes(before, after) -> bool:
    bufs = {i.optional_vars.id for n in ast.walk(after) if isinstance(n, ast.With) for i in n.items
            if is_call(i.context_expr, "io.BytesIO")}
    return all(isinstance(c.args[1], ast.Name) and c.args[1].id in bufs for c in calls(after, "torch.save"))


def _off_loop(kind: str):
    def check(before, after) -> bool:
        starts = calls(after, "threading.Thread") if kind == "thread" else [
            c for c in calls(after, "multiprocessing.get_context") if c.args[0].value == "fork"]
        return bool(starts) and not _top_level_saves(after) and bool(calls(main_fn(after), ".wait"))
    return check


def _pathlib(before, after) -> bool:
    return not calls(after, "os.path.join", "os.replace", "os.makedirs", "os.path.exists") and bool(calls(after, "Path"))


def _logging(before, after) -> bool:
    return not calls(after, "print") and bool(calls(after, "logging.getLogger")) and bool(calls(after, ".info"))


def _groups(before, after) -> bool:
    arg = optimizer_assign(after)[1].value.args[0]
    return isinstance(arg, ast.List) and len(arg.elts) == 2 and all(
        isinstance(d, ast.Dict) and d.keys[0].value == "params" for d in arg.elts)


def _hook(name: str):
    return lambda before, after: any(name in ast.unparse(c) for c in calls(after, ".register_comm_hook"))


def _own_hook(after: ast.Module) -> ast.FunctionDef | None:
    """The script's own function that its DDP wrapper registers as its communication hook."""
    defs = {f.name: f for f in after.body if isinstance(f, ast.FunctionDef)}
    for c in calls(after, ".register_comm_hook"):
        h = kwarg(c, "hook")
        if isinstance(h, ast.Name) and h.id in defs:
            return defs[h.id]
    return None


def _bf16_wire(before, after) -> bool:
    h = _own_hook(after)
    return h is not None and "bfloat16" in ast.unparse(h)


TOOK_EFFECT = {
    "loader-workers": lambda b, a: isinstance(kwarg(train_loader(a), "num_workers"), ast.Constant)
    and kwarg(train_loader(a), "num_workers").value >= 1,
    "eval-persistent-workers": lambda b, a: all(kwarg(c, "persistent_workers") is not None
                                                for c in calls(a, "DataLoader") if c is not train_loader(a)),
    "hand-written-sampler": lambda b, a: "DistributedSampler" not in {n.id for n in ast.walk(a) if isinstance(n, ast.Name)}
    and _class(a, "set_epoch") is not None,
    "micro-batches": _micro,
    "zero-grad-by-hand": lambda b, a: not calls(a, ".zero_grad") and any(
        isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Attribute) and n.targets[0].attr == "grad"
        for n in ast.walk(a)),
    "param-groups": _groups,
    "ddp-bucket-view": lambda b, a: isinstance(kwarg(ddp_assign(a)[1].value, "gradient_as_bucket_view"), ast.Constant),
    "fp16-wire": _hook("fp16_compress_hook"),
    "bf16-wire": _bf16_wire,
    "inference-mode": lambda b, a: len(calls(a, "torch.no_grad")) < len(calls(b, "torch.no_grad"))
    and bool(calls(a, "torch.inference_mode")),
    "checkpoint-rng": _rng,
    "checkpoint-keys": _keys,
    "checkpoint-nested": _nested,
    "ddp-state-dict": _ddp_state,
    "save-via-bytes": _bytes,
    "write-from-thread": _off_loop("thread"),
    "write-from-process": _off_loop("process"),
    "pathlib": _pathlib,
    "logging": _logging,
    "wrap-model": _wrapped,
    "model-before-data": _model_first,
    "step-function": _step_fn,
    "while-loop": _while,
    "config-dataclass": _config,
    "rename-attributes": _attrs_renamed,
    "rename-helpers": lambda b, a: not (_defs(b) - {"main"}) & _defs(a) and len(_defs(a)) >= len(_defs(b)),
    "rename-locals": _locals_renamed,
    "trainer-class": _trainer,
}


def test_every_rewrite_says_why_and_has_a_check_that_it_took_effect():
    assert set(TOOK_EFFECT) == set(BY_NAME), "a rewrite without a check here, or a check for no rewrite"
    for r in REWRITES:
        assert len(r.why) > 30 and "\n" not in r.why, r.name


def test_every_rewrite_applies_to_some_reference():
    assert {name for _, name in APPLIES} == set(BY_NAME)


@pytest.mark.parametrize("slug, name", APPLIES, ids=[f"{s}-{n}" for s, n in APPLIES])
def test_a_rewrite_compiles_imports_only_torch_and_changes_what_it_says(slug, name):
    before = tree(slug)
    snapshot = ast.dump(before)
    after = BY_NAME[name].apply(before)
    assert ast.dump(before) == snapshot, "apply changed the tree it was given"
    src = render(after)
    compile(src, f"{slug}/{name}", "exec")
    assert not undefined(after), f"reads names nothing binds: {undefined(after)}"
    assert not foreign_imports(after), f"imports {foreign_imports(after)}"
    assert ast.dump(after) != snapshot
    assert TOOK_EFFECT[name](before, after), f"{name} did not change {slug}'s script the way it says"


@pytest.mark.parametrize("slug", SLUGS)
def test_every_rewrite_composed_still_compiles(slug):
    names = [r.name for r in REWRITES if r.name not in ("fp16-wire", "bf16-wire")]
    after, done = compose(tree(slug), names)
    compile(render(after), slug, "exec")
    # every one but the 16-bit wires; connection-closed's step skip leaves micro-batches out
    assert not undefined(after) and len(done) >= (14 if slug == "connection-closed" else 15), (done, undefined(after))


def _exec_class(src_tree: ast.Module, cls: ast.ClassDef, **names) -> type:
    ns = {"torch": torch, **names}
    exec(compile(ast.Module(body=[cls], type_ignores=[]), "<rewrite>", "exec"), ns)
    return ns[cls.name]


def test_the_container_prefixes_every_parameter_name():
    after = BY_NAME["wrap-model"].apply(tree("sampler-replay"))
    had = {c.name for c in ast.walk(tree("sampler-replay")) if isinstance(c, ast.ClassDef)}
    added = [c for c in ast.walk(after) if isinstance(c, ast.ClassDef) and c.name not in had]  # the script has its own MLP
    cls = _exec_class(after, added[0], nn=torch.nn)
    inner = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.GELU(), torch.nn.Linear(4, 1))
    wrapped = cls(inner)
    assert [n for n, _ in wrapped.named_parameters()] == [f"inner.{n}" for n, _ in inner.named_parameters()]
    x = torch.randn(5, 3)
    assert torch.equal(wrapped(x), inner(x))


@pytest.mark.parametrize("n, replicas, shuffle, drop_last", [
    (1024, 2, True, True), (1025, 2, True, True), (1025, 2, True, False), (10, 3, False, False), (7, 4, True, False),
])
def test_the_hand_written_sampler_reads_what_distributed_sampler_reads(n, replicas, shuffle, drop_last):
    after = BY_NAME["hand-written-sampler"].apply(tree("memory-leak"))
    cls = _exec_class(after, _class(after, "set_epoch"), math=__import__("math"),
                      Sampler=torch.utils.data.Sampler, dist=None)
    data = list(range(n))
    for epoch in (0, 1, 5):
        for rank in range(replicas):
            mine = cls(data, num_replicas=replicas, rank=rank, shuffle=shuffle, seed=1337, drop_last=drop_last)
            torch_s = DistributedSampler(data, num_replicas=replicas, rank=rank, shuffle=shuffle, seed=1337,
                                         drop_last=drop_last)
            mine.set_epoch(epoch)
            torch_s.set_epoch(epoch)
            assert list(mine) == list(torch_s) and len(mine) == len(torch_s)


def test_micro_batches_weigh_each_part_by_its_rows():
    """The weighted sum of the micro-batches' mean losses is the batch's mean loss, and so its gradient."""
    src = render(BY_NAME["micro-batches"].apply(tree("sampler-replay")))
    assert "micro_x.shape[0] / x.shape[0]" in src
    w = torch.randn(4, 1, requires_grad=True)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    full = torch.autograd.grad(torch.nn.functional.mse_loss(x @ w, y), w)[0]
    parts = sum(torch.nn.functional.mse_loss(mx @ w, my) * (mx.shape[0] / x.shape[0])
                for mx, my in zip(x.chunk(2), y.chunk(2)))
    assert torch.allclose(torch.autograd.grad(parts, w)[0], full, rtol=1e-6, atol=1e-7)


def test_micro_batches_leave_a_loop_whose_step_skip_would_skip_a_micro_batch():
    """connection-closed's fix skips the step with a `continue` between the forward pass and the
    backward: moved into a micro-batch loop, it would skip half a batch and train on the other half
    (the rewrite first failed its world_size_equivalence for that, 2026-11-29). A `continue` of a
    loop of its own, inside the forward, does not leave the step."""
    assert not BY_NAME["micro-batches"].applies(tree("connection-closed"))
    src = render(tree("connection-closed")).replace("                continue\n", "                pass\n")
    assert BY_NAME["micro-batches"].applies(ast.parse(src))
    inner = src.replace("                pass\n", "                for _ in range(1):\n                    continue\n")
    assert BY_NAME["micro-batches"].applies(ast.parse(inner))


class _World:
    """A world of two ranks holding the same gradients: the all-reduce doubles what it is given."""

    @staticmethod
    def size() -> int:
        return 2


class _Dist:
    group = type("group", (), {"WORLD": _World()})

    @staticmethod
    def all_reduce(t, group=None, async_op=False):
        assert t.dtype == torch.bfloat16 and group.size() == 2
        fut = torch.futures.Future()
        fut.set_result([t * 2])
        return type("Work", (), {"get_future": lambda self: fut})()


def test_the_bf16_wire_hook_sends_bf16_and_hands_back_fp32():
    """torch's bf16_compress_hook is refused without CUDA and NCCL, so the rewrite writes its own: the
    bucket goes over the wire as bf16 divided by the world size, and the sum lands in the fp32 bucket."""
    slug = next(s for s, n in APPLIES if n == "bf16-wire")
    after = BY_NAME["bf16-wire"].apply(tree(slug))
    hook = _own_hook(after)
    assert hook is not None
    ns = {"torch": torch, "dist": _Dist}
    src = ast.unparse(hook).replace("torch.distributed.", "dist.")
    exec(compile(src, "<rewrite>", "exec"), ns)
    grads = torch.tensor([1.0 + 2 ** -9, 3.0e-3, -0.123456, 7.0], dtype=torch.float32)
    bucket = type("Bucket", (), {"buffer": lambda self, g=grads.clone(): g})()
    out = ns[hook.name](None, bucket).wait()
    assert out is bucket.buffer() and out.dtype == torch.float32
    assert torch.equal(out, grads.to(torch.bfloat16).float())  # (g / 2 + g / 2) in bf16: g rounded once


def test_a_rewrite_that_does_not_apply_refuses():
    with pytest.raises(ValueError, match="does not apply"):
        BY_NAME["fp16-wire"].apply(tree("lr-scaling"))  # no DDP model to hook


def test_rename_attributes_leaves_an_attribute_another_class_also_has():
    # config-dataclass makes NUM_DOCS a field read as CFG.num_docs, and the dataset sets self.num_docs:
    # renaming the read on CFG (built from a class that never sets it) broke the composed rewrite
    src = ast.parse(
        "class Documents:\n"
        "    def __init__(self, n):\n"
        "        self.num_docs = n\n"
        "        self.width = 3\n"
        "    def __len__(self):\n"
        "        return self.num_docs\n"
        "class Config:\n"
        "    num_docs: int = 4\n"
        "CFG = Config()\n"
        "ds = Documents(CFG.num_docs)\n"
        "print(ds.num_docs, ds.width)\n")
    out = ast.unparse(BY_NAME["rename-attributes"].apply(src))
    assert "self.width_attr = 3" in out and "ds.width_attr" in out, out
    assert "num_docs_attr" not in out, out
