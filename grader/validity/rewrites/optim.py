"""Rewrites of the step's mechanics: parameter groups (another parameter order), gradients cleared
by hand, DDP's gradients as bucket views, a 16-bit gradient wire where the brief allows it, and
inference_mode for evaluation."""

from __future__ import annotations

import ast

from grader.validity.rewrites.base import Rewrite, found, found_as
from grader.validity.source import (
    add_import,
    ddp_assign,
    expr,
    fresh,
    insert_module_defs,
    is_call,
    kwarg,
    locate,
    optimizer_assign,
    snippet,
)


class ParamGroups(Rewrite):
    name = "param-groups"
    why = "the optimizer gets two parameter groups (1-D parameters first, then matrices) with the same settings: another order, the same update"

    def _call(self, tree: ast.Module) -> ast.Call | None:
        opt = optimizer_assign(tree)
        if opt is None:
            return None
        c = opt[1].value  # a call: optimizer_assign finds `name = <optimizer>(...)`
        if isinstance(c, ast.Call) and c.args and is_call(c.args[0], ".parameters") and not c.args[0].args:
            return c
        return None

    def applies(self, tree: ast.Module) -> bool:
        return self._call(tree) is not None

    def change(self, tree: ast.Module) -> None:
        c = found(self._call(tree), "the optimizer's call")
        model = found_as(found_as(c.args[0], ast.Call, "M.parameters()").func, ast.Attribute, "M.parameters").value
        p = fresh(tree, "p")
        groups = found_as(expr(f'[{{"params": [{p} for {p} in M.parameters() if {p}.ndim < 2]}}, '
                               f'{{"params": [{p} for {p} in M.parameters() if {p}.ndim >= 2]}}]'),
                          ast.List, "the parameter groups")
        for d in groups.elts:
            params = found_as(found_as(d, ast.Dict, "a parameter group").values[0], ast.ListComp, "a group's params")
            each = found_as(params.generators[0].iter, ast.Call, "M.parameters()")
            found_as(each.func, ast.Attribute, "M.parameters").value = model
        c.args[0] = groups


class ZeroGradByHand(Rewrite):
    name = "zero-grad-by-hand"
    why = "gradients are cleared by setting each parameter's .grad to None, which is what zero_grad(set_to_none=True) does"

    def _stmts(self, tree: ast.Module) -> list[ast.Expr]:
        opt = optimizer_assign(tree)
        if opt is None:
            return []
        out = []
        for s in ast.walk(tree):
            if isinstance(s, ast.Expr) and is_call(s.value, f"{opt[0]}.zero_grad"):
                v = kwarg(s.value, "set_to_none")
                if v is None or (isinstance(v, ast.Constant) and v.value is True):
                    out.append(s)
        return out

    def applies(self, tree: ast.Module) -> bool:
        return bool(self._stmts(tree))

    def change(self, tree: ast.Module) -> None:
        opt = found(optimizer_assign(tree), "the optimizer")[0]
        g, p = fresh(tree, "group"), fresh(tree, "param")
        for s in self._stmts(tree):
            body, i = found(locate(tree, s), "a zero_grad() statement's place")
            body[i] = snippet(f'''
                for {g} in {opt}.param_groups:
                    for {p} in {g}["params"]:
                        {p}.grad = None
                ''')[0]


class BucketView(Rewrite):
    name = "ddp-bucket-view"
    why = "DDP's gradients are views into its communication buckets (gradient_as_bucket_view=True): the same values, no copy"

    def applies(self, tree: ast.Module) -> bool:
        d = ddp_assign(tree)  # its value a call: ddp_assign finds `name = DDP(...)`
        return d is not None and isinstance(d[1].value, ast.Call) \
            and kwarg(d[1].value, "gradient_as_bucket_view") is None

    def change(self, tree: ast.Module) -> None:
        wrap = found_as(found(ddp_assign(tree), "the DDP wrapper")[1].value, ast.Call, "DDP(...)")
        wrap.keywords.append(ast.keyword("gradient_as_bucket_view", ast.Constant(True)))


class _Wire(Rewrite):
    hook: str

    def applies(self, tree: ast.Module) -> bool:
        return ddp_assign(tree) is not None and not any(is_call(n, ".register_comm_hook") for n in ast.walk(tree))

    def change(self, tree: ast.Module) -> None:
        name, stmt = found(ddp_assign(tree), "the DDP wrapper")
        hooks = add_import(tree, "torch.distributed.algorithms.ddp_comm_hooks", "default_hooks")
        body, i = found(locate(tree, stmt), "the DDP wrapper's place")
        body.insert(i + 1, snippet(f"{name}.register_comm_hook(state=None, hook={hooks}.{self.hook})")[0])


class Fp16Wire(_Wire):
    name = "fp16-wire"
    why = "DDP sends gradients as fp16 and averages them back in fp32 (fp16_compress_hook), where the brief allows a 16-bit wire"
    hook = "fp16_compress_hook"
    conflicts = ("bf16-wire",)


class Bf16Wire(_Wire):
    """torch's own ``bf16_compress_hook`` is refused by DDP on any build without CUDA and NCCL 2.10+
    (a check of the hook's name, whatever the backend), though gloo sums bf16 on the CPU: the
    rewrite registers a hook of the script's own that takes the same steps."""

    name = "bf16-wire"
    why = ("DDP sends gradients as bf16 and averages them back in fp32 (bf16_compress_hook's steps, in a hook of the "
           "script's own), where the brief allows a 16-bit wire")
    conflicts = ("fp16-wire",)

    def change(self, tree: ast.Module) -> None:
        name, stmt = found(ddp_assign(tree), "the DDP wrapper")
        th, dist = add_import(tree, "torch"), add_import(tree, "torch.distributed")
        hook = fresh(tree, "bf16_wire_hook")
        insert_module_defs(tree, snippet(f'''
            def {hook}(state, bucket):
                """Each gradient bucket cast to bf16 and divided by the world size, summed over the ranks in
                bf16, and copied back into the fp32 bucket: the steps of torch's bf16_compress_hook."""
                group = state if state is not None else {dist}.group.WORLD
                buffer = bucket.buffer()
                wire = buffer.to({th}.bfloat16).div_(group.size())
                done = {dist}.all_reduce(wire, group=group, async_op=True).get_future()

                def decompress(fut):
                    buffer.copy_(fut.value()[0])
                    return buffer

                return done.then(decompress)
            '''))
        body, i = found(locate(tree, stmt), "the DDP wrapper's place")
        body.insert(i + 1, snippet(f"{name}.register_comm_hook(state=None, hook={hook})")[0])


def _item_only(fn: ast.FunctionDef) -> bool:
    """Every return of ``fn`` hands back a Python number (``.item()``), never a tensor."""
    rets = [n for n in ast.walk(fn) if isinstance(n, ast.Return)]
    return bool(rets) and all(is_call(r.value, ".item", "float") for r in rets)


class InferenceMode(Rewrite):
    name = "inference-mode"
    why = "evaluation runs under torch.inference_mode() instead of no_grad(): no graph either way, and its results leave as numbers"

    def _sites(self, tree: ast.Module) -> list[ast.Call]:
        out = []
        for n in ast.walk(tree):
            if isinstance(n, ast.With):
                out += [i.context_expr for i in n.items if is_call(i.context_expr, "torch.no_grad")]
            if isinstance(n, ast.FunctionDef) and _item_only(n):
                out += [d for d in n.decorator_list if is_call(d, "torch.no_grad")]
        return out

    def applies(self, tree: ast.Module) -> bool:
        return bool(self._sites(tree))

    def change(self, tree: ast.Module) -> None:
        for c in self._sites(tree):
            found_as(c.func, ast.Attribute, "torch.no_grad").attr = "inference_mode"
