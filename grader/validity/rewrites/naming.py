"""Rewrites that change names and idioms, never values: local variables, the script's helpers and
their attributes, print to logging, os.path to pathlib."""

from __future__ import annotations

import ast

from grader.validity.rewrites.base import Rewrite, found, found_call
from grader.validity.source import (
    add_import,
    assigned_from,
    dotted,
    fresh,
    insert_module_defs,
    is_call,
    kwarg,
    main_fn,
    names,
    snippet,
    stored,
)

# the names exercise scripts give their job's parts, and what a team with other habits calls them
LOCALS = {"model": "net", "raw_model": "bare_net", "optimizer": "opt", "scheduler": "lr_sched",
          "scaler": "loss_scaler", "loader": "train_batches", "sampler": "shard_sampler", "step": "global_step",
          "epoch": "ep", "device": "dev", "rank": "rank_id", "world_size": "n_ranks",
          "master_process": "is_leader", "loss": "batch_loss", "x": "inputs", "y": "targets",
          "ckpt": "restored", "train_set": "train_data", "batch_size": "per_rank_batch"}


class _Renamer(ast.NodeTransformer):
    def __init__(self, mapping: dict[str, str]):
        self.m = mapping

    def visit_Name(self, node: ast.Name) -> ast.Name:
        node.id = self.m.get(node.id, node.id)
        return node

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.arg = self.m.get(node.arg, node.arg)
        return node

    def visit_Nonlocal(self, node: ast.Nonlocal) -> ast.Nonlocal:
        node.names = [self.m.get(n, n) for n in node.names]
        return node

    def visit_Global(self, node: ast.Global) -> ast.Global:
        node.names = [self.m.get(n, n) for n in node.names]
        return node



def _fresh_map(tree: ast.Module, wanted: dict[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    taken = names(tree)  # the tree is not changed here: one walk, not one per wanted name
    for old, new in wanted.items():
        out[old] = fresh(tree, new) if new in taken or new in out.values() else new
    return out


class RenameLocals(Rewrite):
    name = "rename-locals"
    why = "a local variable is only a name: every use of it in main (and in the closures there) is renamed alike"

    def _plan(self, tree: ast.Module) -> dict[str, str]:
        main = main_fn(tree)
        if main is None:
            return {}
        bound = stored(main)
        return _fresh_map(tree, {o: n for o, n in LOCALS.items() if o in bound})

    def applies(self, tree: ast.Module) -> bool:
        return bool(self._plan(tree))

    def change(self, tree: ast.Module) -> None:
        plan, main = self._plan(tree), found(main_fn(tree), "main")
        for stmt in main.body:
            _Renamer(plan).visit(stmt)


class RenameHelpers(Rewrite):
    name = "rename-helpers"
    why = "the script's own functions and classes are renamed at their definition and at every use"

    def _plan(self, tree: ast.Module) -> dict[str, str]:
        defs = [s.name for s in tree.body if isinstance(s, (ast.FunctionDef, ast.ClassDef)) and s.name != "main"]
        return _fresh_map(tree, {d: (f"_{d}" if not d.startswith("_") else f"{d}_impl") for d in defs})

    def applies(self, tree: ast.Module) -> bool:
        return bool(self._plan(tree))

    def change(self, tree: ast.Module) -> None:
        plan = self._plan(tree)
        _Renamer(plan).visit(tree)
        for s in tree.body:  # the definitions themselves (a method of the same name is another thing)
            if isinstance(s, (ast.FunctionDef, ast.ClassDef)):
                s.name = plan.get(s.name, s.name)


# attributes a torch base class reads or writes itself: renaming the subclass's copy would split them
BASE_ATTRS = {"epoch", "seed", "rank", "num_replicas", "num_samples", "total_size", "dataset", "shuffle",
              "drop_last", "training", "generator"}


class RenameAttributes(Rewrite):
    name = "rename-attributes"
    why = "an attribute the script's own classes set is renamed wherever it is read, on self or on an instance"

    def _plan(self, tree: ast.Module) -> dict[str, str]:
        classes = [s for s in tree.body if isinstance(s, ast.ClassDef)]
        setters: dict[str, set[str]] = {}  # attribute -> the classes that set it on self
        for c in classes:
            for n in ast.walk(c):
                targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(
                    n, (ast.AugAssign, ast.AnnAssign)) else []
                for t in targets:
                    for node in ast.walk(t):
                        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                                and node.value.id == "self":
                            setters.setdefault(node.attr, set()).add(c.name)
        inside = {id(n): c.name for c in classes for n in ast.walk(c)}
        ok = {}
        for a in sorted(set(setters) - BASE_ATTRS):
            if a.startswith("__"):
                continue
            # read on self only inside a class that sets it, elsewhere only on a name built from one:
            # another class's field of the same name (a config dataclass's) is another attribute
            instances = {n for n, _ in assigned_from(tree, *setters[a])}
            uses = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == a]
            if all(isinstance(u.value, ast.Name) and (
                    inside.get(id(u)) in setters[a] if u.value.id == "self" else u.value.id in instances)
                   for u in uses):
                ok[a] = f"{a}_attr"
        taken = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        return {a: n for a, n in ok.items() if n not in taken}

    def applies(self, tree: ast.Module) -> bool:
        return bool(self._plan(tree))

    def change(self, tree: ast.Module) -> None:
        plan = self._plan(tree)
        for n in ast.walk(tree):
            if isinstance(n, ast.Attribute) and n.attr in plan:
                n.attr = plan[n.attr]


def _prints(tree: ast.Module) -> list[ast.Expr]:
    return [s for s in ast.walk(tree) if isinstance(s, ast.Expr) and is_call(s.value, "print")
            and not any(k.arg in ("file", "sep", "end") for k in s.value.keywords)
            and not any(isinstance(a, ast.Starred) for a in s.value.args)]


class Logging(Rewrite):
    name = "logging"
    why = "progress lines go through logging instead of print: only where the job's messages go changes"

    def applies(self, tree: ast.Module) -> bool:
        return main_fn(tree) is not None and bool(_prints(tree))

    def change(self, tree: ast.Module) -> None:
        logging = add_import(tree, "logging")
        log = fresh(tree, "LOG")
        for s in _prints(tree):
            args = found_call(s, "print()").args
            if len(args) == 1:
                msg = args[0] if isinstance(args[0], ast.JoinedStr) else ast.Call(ast.Name("str", ast.Load()), [args[0]], [])
            else:
                msg = ast.Call(ast.Attribute(ast.Constant(" "), "join", ast.Load()),
                               [ast.Call(ast.Name("map", ast.Load()), [ast.Name("str", ast.Load()),
                                                                      ast.Tuple(args, ast.Load())], [])], [])
            s.value = ast.Call(ast.Attribute(ast.Name(log, ast.Load()), "info", ast.Load()), [msg], [])
        insert_module_defs(tree, snippet(f'{log} = {logging}.getLogger("train")'))
        main = found(main_fn(tree), "main")
        first = 1 if main.body and isinstance(main.body[0], ast.Expr) and isinstance(main.body[0].value, ast.Constant) else 0
        main.body[first:first] = snippet(f'{logging}.basicConfig(level={logging}.INFO, format="%(message)s")')


class _Pathlib(ast.NodeTransformer):
    def __init__(self, path: str):
        self.P = path

    def _p(self, a: ast.expr) -> ast.Call:
        return ast.Call(ast.Name(self.P, ast.Load()), [a], [])

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        d, a = dotted(node.func), node.args
        if d == "os.path.join" and a and not node.keywords:
            return ast.Call(ast.Name("str", ast.Load()), [ast.Call(ast.Name(self.P, ast.Load()), a, [])], [])
        if d == "os.makedirs" and len(a) == 1 and isinstance(exist_ok := kwarg(node, "exist_ok"), ast.Constant) \
                and exist_ok.value is True:
            return ast.Call(ast.Attribute(self._p(a[0]), "mkdir", ast.Load()), [],
                            [ast.keyword("parents", ast.Constant(True)), ast.keyword("exist_ok", ast.Constant(True))])
        if d == "os.path.exists" and len(a) == 1:
            return ast.Call(ast.Attribute(self._p(a[0]), "exists", ast.Load()), [], [])
        if d == "os.replace" and len(a) == 2:
            return ast.Call(ast.Attribute(self._p(a[0]), "replace", ast.Load()), [a[1]], [])
        if d == "os.path.dirname" and len(a) == 1:
            return ast.Call(ast.Name("str", ast.Load()), [ast.Attribute(self._p(a[0]), "parent", ast.Load())], [])
        if d == "os.path.basename" and len(a) == 1:
            return ast.Attribute(self._p(a[0]), "name", ast.Load())
        return node


PATH_CALLS = ("os.path.join", "os.makedirs", "os.path.exists", "os.replace", "os.path.dirname", "os.path.basename")


class Pathlib(Rewrite):
    name = "pathlib"
    why = "os.path, os.makedirs and os.replace become their pathlib.Path equivalents: the same files, the same renames"

    def applies(self, tree: ast.Module) -> bool:
        return any(is_call(n, *PATH_CALLS) for n in ast.walk(tree))

    def change(self, tree: ast.Module) -> None:
        path = add_import(tree, "pathlib", "Path")
        _Pathlib(path).visit(tree)
