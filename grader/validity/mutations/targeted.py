"""Mutations aimed at one mechanism of a fix, where the script has it: a static loss scale in place
of the GradScaler, clipping before unscaling, a snapshot that is not a copy (the background
writer saves tensors training goes on changing), a background writer the step loop waits for
again (joined after every submit, or its write run on the training thread), a batched
collate_fn the fix introduced applied one record at a time, and a transpose the fix introduced
left out (the same numbers read in another layout)."""

from __future__ import annotations

import ast

from grader.validity.mutations.base import Fix, Mutant, Mutation, Skipped, keep
from grader.validity.source import bodies, calls, dotted, fresh, is_call, kwarg, parse, render, snippet, train_loop

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
        out: list[Mutant] = []
        skipped: list[Skipped] = []
        keep(Mutant(self.name, self.name, what, render(tree)), fix, out, skipped)
        return out, skipped


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


def _background_writer(tree: ast.Module) -> tuple[str, str, str] | None:
    """A class that works on a thread of its own: (the method that starts the thread, the method the
    thread runs, the method that joins it), or None."""
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        methods = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)}
        start = target = join = None
        for f in methods.values():
            for c in ast.walk(f):
                if is_call(c, "threading.Thread", "Thread"):
                    t = kwarg(c, "target")
                    if isinstance(t, ast.Attribute) and dotted(t.value) == "self" and t.attr in methods:
                        start, target = f.name, t.attr
                elif is_call(c, ".join") and not c.args and not c.keywords:
                    join = f.name
        if start and target and join and join != start:
            return start, target, join
    return None


def _submits(tree: ast.Module) -> tuple[tuple[str, str, str], list[tuple[list[ast.stmt], int, ast.Attribute]]]:
    """The script's background writer (``_background_writer``) and the statements of the step loop
    that hand it its work, ``obj.<start>(...)``: each as (its statement list, its index, the
    called attribute). No writer, or no such statement: an empty list."""
    found = _background_writer(tree)
    loop = train_loop(tree)
    if found is None or loop is None:
        return ("", "", ""), []
    return found, [(body, i, s.value.func) for body in bodies(loop) for i, s in enumerate(body)
                   if isinstance(s, ast.Expr) and is_call(s.value, "." + found[0])
                   and isinstance(s.value.func, ast.Attribute)]


class WaitInLoop(_Rewriting):
    name = "wait-in-loop"
    breaks = "the background write is waited for in the step loop: the loop stalls for the disk and the store again"

    def mutate(self, tree: ast.Module) -> str | None:
        (start, _, join), subs = _submits(tree)
        for body, i, called in reversed(subs):
            body.insert(i + 1, snippet(f"{ast.unparse(called.value)}.{join}()")[0])
        return (f"the step loop calls .{join}() right after each .{start}(...): the write still runs on its "
                "thread, and the loop waits for it to end") if subs else None


class WriteInLoop(_Rewriting):
    name = "write-in-loop"
    breaks = "the checkpoint is written on the training thread again: the loop stalls for the disk and the store"

    def mutate(self, tree: ast.Module) -> str | None:
        (start, target, _), subs = _submits(tree)
        for _, _, called in subs:
            called.attr = target
        return (f"the step loop calls .{target}(...), what the writer's thread runs, in place of .{start}(...): "
                "the snapshot is written on the training thread") if subs else None


LOADERS = ("DataLoader", "torch.utils.data.DataLoader", "data.DataLoader")


def _collates(tree: ast.Module) -> list[ast.keyword]:
    """The ``collate_fn=`` arguments of the script's DataLoaders (None left out)."""
    return [k for c in calls(tree, *LOADERS) for k in c.keywords
            if k.arg == "collate_fn" and not (isinstance(k.value, ast.Constant) and k.value.value is None)]


class CollatePerRecord(Mutation):
    name = "collate-per-record"
    breaks = "the fix's batched collate_fn applied one record at a time, the pieces concatenated: the same " \
             "batch, the per-record cost back"

    def generate(self, fix: Fix) -> tuple[list[Mutant], list[Skipped]]:
        # Only a collate the fix brought: one the broken script already had is not the fix's mechanism.
        before = {ast.unparse(k.value) for k in _collates(parse(fix.broken))}
        tree = fix.ref_tree
        found = [k for k in _collates(tree) if ast.unparse(k.value) not in before]
        if not found:
            return [], []
        helper = fresh(tree, "collate_each")
        for k in found:
            k.value = ast.Call(ast.Name(helper, ast.Load()), [k.value], [])
        first = next(i for i, s in enumerate(tree.body) if isinstance(s, ast.FunctionDef | ast.ClassDef))
        tree.body[first:first] = snippet(f'''
            def {helper}(collate):
                def each(batch):
                    parts = [collate([item]) for item in batch]
                    return tuple(torch.cat(column) for column in zip(*parts))
                return each
            ''')
        what = ", ".join(ast.unparse(k.value.args[0]) for k in found if isinstance(k.value, ast.Call))
        kept = {x.strip() for x in fix.broken_lines}
        line = next((x.strip() for x in fix.ref_lines if "collate_fn=" in x and x.strip() not in kept), "")
        out: list[Mutant] = []
        skipped: list[Skipped] = []
        keep(Mutant(self.name, self.name, f"the DataLoader's collate_fn {what} called on one record at a time "
                    "and the results concatenated along the batch", render(tree), touches=line), fix, out, skipped)
        return out, skipped


LAYOUT = (".transpose", ".permute", ".movedim", ".swapaxes")


class DropTranspose(Mutation):
    name = "drop-transpose"
    breaks = "a transpose the fix brought is left out: the same numbers read in another layout (an interleaved " \
             "channel taken for time)"

    def generate(self, fix: Fix) -> tuple[list[Mutant], list[Skipped]]:
        added = {i + 1 for h in fix.hunks for i in range(*h.ref)}  # 1-based lines the fix wrote
        sites = [c for c in calls(fix.ref_tree, *LAYOUT)
                 if isinstance(c.func, ast.Attribute) and c.lineno in added]
        made: list[Mutant] = []
        skipped: list[Skipped] = []
        for n, site in enumerate(sites, 1):
            tree = fix.ref_tree
            target = next(c for c in calls(tree, *LAYOUT)
                          if (c.lineno, c.col_offset) == (site.lineno, site.col_offset))
            assert isinstance(target.func, ast.Attribute)
            receiver = target.func.value
            for parent in ast.walk(tree):  # the call replaced by what it was called on
                for fname, value in ast.iter_fields(parent):
                    if value is target:
                        setattr(parent, fname, receiver)
            name = self.name if len(sites) == 1 else f"{self.name}-{n}"
            keep(Mutant(name, self.name, f"{ast.unparse(site)} left out: {ast.unparse(receiver)} read in its stored "
                        "layout", render(tree), touches=fix.ref_lines[site.lineno - 1].strip()), fix, made, skipped)
        return made, skipped
