"""Rewrites that restructure the script: the model inside a container module, the job as a class,
the step as a function, the constants as a config dataclass, the batch loop as a while loop, the
model built before the data."""

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
    is_constant_name,
    leaves_loop,
    loaded,
    locate,
    main_fn,
    optimizer_assign,
    snippet,
    step_stmt,
    stored,
    train_loop,
)


def _assigns(stmt: ast.stmt, name: str) -> bool:
    return isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in stmt.targets)


class WrapModel(Rewrite):
    name = "wrap-model"
    why = "the model sits inside a container module whose forward calls it: the same parameters, named with a prefix"

    def _at(self, tree: ast.Module) -> int | None:
        """Where the container goes in main: before ``raw_model = model``, else before DDP or the optimizer."""
        main = main_fn(tree)
        if main is None:
            return None
        at = next((i for i, s in enumerate(main.body) if ddp_assign(s) or optimizer_assign(s) or (
            isinstance(s, ast.Assign) and isinstance(s.value, ast.Name) and s.value.id == "model"
            and _assigns(s, "raw_model"))), None)
        return at if at is not None and any(_assigns(s, "model") for s in main.body[:at]) else None

    def applies(self, tree: ast.Module) -> bool:
        return self._at(tree) is not None

    def change(self, tree: ast.Module) -> None:
        at, cls = found(self._at(tree), "the container's place in main"), fresh(tree, "TrainedModel")
        found(main_fn(tree), "main").body.insert(at, snippet(f"model = {cls}(model)")[0])
        insert_module_defs(tree, snippet(f'''
            class {cls}(torch.nn.Module):
                """The job's model inside a container of the team's own: its parameters are named inner.*."""

                def __init__(self, inner):
                    super().__init__()
                    self.inner = inner

                def forward(self, *args, **kwargs):
                    return self.inner(*args, **kwargs)
            '''))


class _ToSelf(ast.NodeTransformer):
    """Names of main's locals become attributes of ``self``, except where a nested scope binds its own."""

    def __init__(self, fields: set[str]):
        self.fields = fields
        self.shadow: list[set[str]] = []

    def _hidden(self, name: str) -> bool:
        return any(name in s for s in self.shadow)

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.fields and not self._hidden(node.id):
            return ast.copy_location(ast.Attribute(ast.Name("self", ast.Load()), node.id, node.ctx), node)
        return node

    def _scope(self, node, own: set[str]):
        self.shadow.append(own)
        self.generic_visit(node)
        self.shadow.pop()
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        nonlocal_ = {n for s in ast.walk(node) if isinstance(s, ast.Nonlocal) for n in s.names}
        own = (stored(node) - {node.name}) - nonlocal_
        for s in ast.walk(node):  # main's names a closure rebinds are attributes now: no nonlocal
            if isinstance(s, ast.Nonlocal):
                s.names = [n for n in s.names if n not in self.fields]
        self._scope(node, own)
        node.body = [s for s in node.body if not (isinstance(s, ast.Nonlocal) and not s.names)] or [ast.Pass()]
        return node

    def visit_Lambda(self, node: ast.Lambda) -> ast.AST:
        return self._scope(node, {a.arg for a in node.args.args})

    def _comp(self, node):
        return self._scope(node, {n for g in node.generators for n in stored(g.target)})

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comp


class TrainerClass(Rewrite):
    name = "trainer-class"
    why = "main's body runs as a method of a Trainer object, its variables held as attributes: the same statements in the same order"

    def _fields(self, tree: ast.Module) -> set[str] | None:
        main = main_fn(tree)
        if main is None or main.args.args:
            return None
        own: set[str] = set()
        for s in main.body:
            for n in ast.walk(s):
                if isinstance(n, (ast.Global, ast.Return, ast.Yield, ast.YieldFrom, ast.NamedExpr, ast.Import,
                                  ast.ImportFrom)):
                    return None
            own |= {n.id for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        handlers = {n.name for n in ast.walk(main) if isinstance(n, ast.ExceptHandler) and n.name}
        defs = {n.name for n in ast.walk(main) if isinstance(n, ast.FunctionDef) and n is not main}
        if handlers & own or defs & own:
            return None
        return own  # a closure defined in main stays a local of run(), called by its name

    def applies(self, tree: ast.Module) -> bool:
        return bool(self._fields(tree))

    def change(self, tree: ast.Module) -> None:
        main, fields = found(main_fn(tree), "main"), found(self._fields(tree), "main's locals")
        cls = fresh(tree, "Trainer")
        body = main.body
        doc = body[:1] if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) else []
        body = body[len(doc):]
        out = [_ToSelf(fields).visit(s) for s in body]
        klass = found_as(snippet(f'''
            class {cls}:
                """The training job: its set-up and step loop, run once, with the job's state as attributes."""

                def run(self) -> None:
                    pass
            ''')[0], ast.ClassDef, "the Trainer class")
        found_as(klass.body[1], ast.FunctionDef, "Trainer.run").body = out
        main.body = doc + snippet(f"{cls}().run()")
        insert_module_defs(tree, [klass])


class StepFunction(Rewrite):
    name = "step-function"
    why = "the batch loop's body becomes a closure called once per batch; every variable it sets is main's (nonlocal), as before"

    def _loop(self, tree: ast.Module) -> ast.For | None:
        loop = train_loop(tree)
        if not isinstance(loop, ast.For) or loop.orelse:
            return None
        for s in loop.body:
            if leaves_loop(s):
                return None
            for n in ast.walk(s):
                if isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom, ast.Global, ast.Nonlocal)):
                    return None
        return loop

    def applies(self, tree: ast.Module) -> bool:
        return main_fn(tree) is not None and self._loop(tree) is not None

    def change(self, tree: ast.Module) -> None:
        loop, main = found(self._loop(tree), "the batch loop"), found(main_fn(tree), "main")
        fn, batch = fresh(tree, "train_step"), fresh(tree, "batch")
        bound = set(stored(loop.target))
        for s in loop.body:
            bound |= {n.id for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        shared = sorted(bound)
        # nonlocal needs a binding in main: a name only the loop binds is bound to None before it
        prebind = [n for n in shared if not _bound_outside(main, loop, n)]
        defn = found_as(snippet(f"def {fn}({batch}):\n    pass")[0], ast.FunctionDef, "the step function")
        declared: list[ast.stmt] = [ast.Nonlocal(shared)] if shared else []
        defn.body = declared + [ast.Assign([loop.target], ast.Name(batch, ast.Load()))] + loop.body
        body, i = found(locate(tree, loop), "the batch loop's place")
        loop.target = ast.Name(batch, ast.Store())
        loop.body = snippet(f"{fn}({batch})")
        body[i:i] = [snippet(f"{n} = None")[0] for n in prebind] + [defn]


def _bound_outside(main: ast.FunctionDef, loop: ast.stmt, name: str) -> bool:
    for n in ast.walk(main):
        if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Store):
            if not any(n is x for x in ast.walk(loop)):
                return True
    return False


def batch_loop(tree: ast.Module) -> ast.For | ast.While | None:
    """The loop over batches: the one whose body holds the optimizer step, or calls the closure that does."""
    loop = train_loop(tree)
    if loop is not None:
        return loop
    step = step_stmt(tree)
    holders = {f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
               and any(n is step for n in ast.walk(f)) and f.name != "main"}
    for n in ast.walk(tree):
        if isinstance(n, (ast.For, ast.While)) and len(n.body) == 1 and isinstance(n.body[0], ast.Expr) \
                and isinstance(n.body[0].value, ast.Call) and isinstance(n.body[0].value.func, ast.Name) \
                and n.body[0].value.func.id in holders:
            return n
    return None


class WhileLoop(Rewrite):
    name = "while-loop"
    why = "the batch loop is written with iter() and next() until StopIteration: the same batches in the same order"

    def applies(self, tree: ast.Module) -> bool:
        loop = batch_loop(tree)
        return isinstance(loop, ast.For) and not loop.orelse

    def change(self, tree: ast.Module) -> None:
        loop = found_as(batch_loop(tree), ast.For, "the batch loop")
        it = fresh(tree, "batches_left")
        body, i = found(locate(tree, loop), "the batch loop's place")
        new = snippet(f'''
            {it} = iter(ITERABLE)
            while True:
                try:
                    TARGET = next({it})
                except StopIteration:
                    break
            ''')
        start = found_as(found_as(new[0], ast.Assign, "iter()").value, ast.Call, "iter()")
        start.args = [loop.iter]
        while_ = found_as(new[1], ast.While, "the while loop")
        try_ = found_as(while_.body[0], ast.Try, "the try around next()")
        found_as(try_.body[0], ast.Assign, "TARGET = next()").targets = [loop.target]
        while_.body += loop.body
        body[i:i + 1] = new


class ConfigDataclass(Rewrite):
    name = "config-dataclass"
    why = "the module's constants become fields of a frozen dataclass instance, read as CFG.<field>: the same values"

    def _constants(self, tree: ast.Module) -> list[ast.Assign]:
        first_def = next((i for i, s in enumerate(tree.body) if isinstance(s, (ast.FunctionDef, ast.ClassDef))),
                         len(tree.body))
        out = [s for s in tree.body[:first_def] if isinstance(s, ast.Assign) and len(s.targets) == 1
               and isinstance(s.targets[0], ast.Name) and is_constant_name(s.targets[0].id)]
        consts = {_target(s) for s in out}
        rebound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
                   and n.id in consts}
        if any(sum(1 for s in out if _target(s) == c) > 1 for c in rebound):
            return []
        return out

    def applies(self, tree: ast.Module) -> bool:
        return len(self._constants(tree)) >= 2

    def change(self, tree: ast.Module) -> None:
        consts = self._constants(tree)
        dataclasses = add_import(tree, "dataclasses")
        cls, inst = fresh(tree, "TrainConfig"), fresh(tree, "CFG")
        fields = {_target(s): _target(s).lower() for s in consts}
        klass = found_as(snippet(f'''
            @{dataclasses}.dataclass(frozen=True)
            class {cls}:
                """The job's settings."""
            ''')[0], ast.ClassDef, "the config class")
        for s in consts:
            value = _FieldRefs(fields, None).visit(s.value)  # earlier fields, by their class-body names
            ann = {int: "int", float: "float", str: "str", bool: "bool"}.get(
                type(value.value), "object") if isinstance(value, ast.Constant) else (
                "tuple" if isinstance(value, ast.Tuple) else "object")
            if isinstance(value, (ast.List, ast.Dict, ast.Set)):
                factory = found_as(expr(f"{dataclasses}.field(default_factory=lambda: None)"), ast.Call,
                                   "dataclasses.field()")
                found_as(factory.keywords[0].value, ast.Lambda, "the default factory").body = s.value
                value = factory
            klass.body.append(ast.AnnAssign(ast.Name(fields[_target(s)], ast.Store()), ast.Name(ann, ast.Load()),
                                            value, simple=1))
        at = tree.body.index(consts[0])
        for s in consts:
            tree.body.remove(s)
        for later in tree.body[at:]:
            _FieldRefs(fields, inst).visit(later)
        tree.body[at:at] = [klass, *snippet(f"{inst} = {cls}()")]


def _target(const: ast.Assign) -> str:
    """The name a module constant is assigned to (``_constants`` keeps only ``NAME = ...``)."""
    return found_as(const.targets[0], ast.Name, "a constant's name").id


class _FieldRefs(ast.NodeTransformer):
    def __init__(self, fields: dict[str, str], inst: str | None):
        self.fields, self.inst = fields, inst

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id in self.fields and isinstance(node.ctx, ast.Load):
            if self.inst is None:
                return ast.Name(self.fields[node.id], ast.Load())
            return ast.Attribute(ast.Name(self.inst, ast.Load()), self.fields[node.id], ast.Load())
        return node


class ModelBeforeData(Rewrite):
    name = "model-before-data"
    why = "the model and optimizer are built before the datasets and loaders: the kit's model and data draw from their own seeded generators"

    def _blocks(self, tree: ast.Module) -> tuple[int, int, int] | None:
        """(data start, model start, model end): main's statements after the seed, and the model's."""
        main = main_fn(tree)
        if main is None:
            return None
        seed = next((i for i, s in enumerate(main.body) if isinstance(s, ast.Expr)
                     and is_call(s.value, "torch.manual_seed")), None)
        m0 = next((i for i, s in enumerate(main.body) if _assigns(s, "model")), None)
        m1 = next((i for i, s in enumerate(main.body) if optimizer_assign(s)), None)
        if seed is None or m0 is None or m1 is None or not seed + 1 < m0 <= m1:
            return None
        data = main.body[seed + 1:m0]
        made = set().union(*(stored(s) for s in data))
        needs = set().union(*(loaded(s) for s in main.body[m0:m1 + 1]))
        if made & needs or not any("loader" in n or "sampler" in n for n in made):
            return None
        return seed + 1, m0, m1 + 1

    def applies(self, tree: ast.Module) -> bool:
        return self._blocks(tree) is not None

    def change(self, tree: ast.Module) -> None:
        d0, m0, m1 = found(self._blocks(tree), "main's data and model blocks")
        body = found(main_fn(tree), "main").body
        body[d0:m1] = body[m0:m1] + body[d0:m0]

