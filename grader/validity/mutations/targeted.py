"""Mutations aimed at one mechanism of a fix, where the script has it: a static loss scale in place
of the GradScaler, clipping before unscaling, and a snapshot that is not a copy (the background
writer saves tensors training goes on changing)."""

from __future__ import annotations

import ast

from grader.validity.mutations.base import Fix, Mutant, Mutation, Skipped, problem
from grader.validity.source import bodies, dotted, is_call, render, snippet

LOSS_SCALE = 65536.0  # GradScaler's initial scale, held fixed


def _scaler(tree: ast.Module) -> str | None:
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign) and is_call(n.value, "torch.amp.GradScaler", "torch.cuda.amp.GradScaler",
                                                  "GradScaler") and isinstance(n.targets[0], ast.Name):
            return n.targets[0].id
    return None


class _Rewriting(Mutation):
    def mutate(self, tree: ast.Module) -> str | None:
        """The mutated tree in place, and what changed; None where the script lacks the mechanism."""
        raise NotImplementedError

    def generate(self, fix: Fix) -> tuple[list[Mutant], list[Skipped]]:
        tree = fix.ref_tree
        what = self.mutate(tree)
        if what is None:
            return [], []
        src = render(tree)
        why = problem(src, fix)
        if why:
            return [], [Skipped(self.name, why)]
        return [Mutant(self.name, self.name, what, src)], []


class StaticLossScale(_Rewriting):
    name = "static-loss-scale"
    breaks = "a fixed loss scale instead of the dynamic scaler: an overflowing step is applied, not skipped"

    def mutate(self, tree: ast.Module) -> str | None:
        sc = _scaler(tree)
        if sc is None:
            return None
        changed = False
        for body in bodies(tree):
            for i, s in reversed(list(enumerate(body))):
                if not isinstance(s, ast.Expr) or not isinstance(s.value, ast.Call):
                    continue
                c, d = s.value, dotted(s.value.func) or ""
                if d == f"{sc}.update":
                    body[i:i + 1] = [ast.Pass()]
                elif d == f"{sc}.step" and c.args:
                    body[i] = snippet(f"{ast.unparse(c.args[0])}.step()")[0]
                elif d == f"{sc}.unscale_" and c.args:
                    opt = ast.unparse(c.args[0])
                    body[i] = snippet(f'''
                        for group in {opt}.param_groups:
                            for p in group["params"]:
                                if p.grad is not None:
                                    p.grad.div_({LOSS_SCALE})
                        ''')[0]
                elif is_call(c, ".backward") and isinstance(c.func, ast.Attribute) and is_call(c.func.value, f"{sc}.scale"):
                    loss = c.func.value.args[0]
                    c.func.value = ast.BinOp(loss, ast.Mult(), ast.Constant(LOSS_SCALE))
                else:
                    continue
                changed = True
        return f"the loss multiplied by a constant {LOSS_SCALE:g} and the gradients divided by it, the GradScaler " \
               "kept for the checkpoint but no longer stepping" if changed else None


class ClipBeforeUnscale(_Rewriting):
    name = "clip-before-unscale"
    breaks = "gradients clipped while still scaled: the clip threshold applies to the scaled norm"

    def mutate(self, tree: ast.Module) -> str | None:
        sc = _scaler(tree)
        if sc is None:
            return None
        for body in bodies(tree):
            for i in range(len(body) - 1):
                a, b = body[i], body[i + 1]
                if isinstance(a, ast.Expr) and is_call(a.value, f"{sc}.unscale_") and any(
                        is_call(c, "torch.nn.utils.clip_grad_norm_", "clip_grad_norm_") for c in ast.walk(b)):
                    body[i], body[i + 1] = b, a
                    return "clip_grad_norm_ moved before scaler.unscale_"
        return None


class LiveSnapshot(_Rewriting):
    name = "live-snapshot"
    breaks = "the checkpoint's snapshot shares the live tensors: it is written while training goes on changing them"

    def mutate(self, tree: ast.Module) -> str | None:
        found = False
        for c in ast.walk(tree):
            if is_call(c, ".to") and any(k.arg == "copy" for k in c.keywords):
                c.keywords = [k for k in c.keywords if k.arg != "copy"]
                found = True
        return "the snapshot's tensors taken with .to(\"cpu\") and no copy: views of the parameters and optimizer " \
               "state, which the next steps change while the writer saves them" if found else None
