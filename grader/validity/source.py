"""AST helpers the rewrites and mutations share: parsing and printing a script, dotted names,
statement lists and where a statement sits, the names a piece of code binds and reads, a fresh
name, an added import, and the anchors every exercise script has (``main``, the training loop, the
optimizer step, the checkpoint dicts, the DDP wrapper).

Everything here reads a tree; nothing changes one except ``add_import``, ``insert_module_defs`` and
``strip_docstrings``, which the caller applies to its own copy."""

from __future__ import annotations

import ast
import builtins
import textwrap
from collections.abc import Iterator
from functools import lru_cache
from typing import Any, TypeGuard

Body = list[ast.stmt]


def parse(text: str) -> ast.Module:
    return ast.parse(text)


def render(tree: ast.Module) -> str:
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def clone(tree: ast.Module) -> ast.Module:
    """A copy no change to which reaches ``tree`` (a plain walk of the fields: 40% faster than
    ``copy.deepcopy``, which the suite's generation spent most of its time in)."""
    out = _copy(tree)
    assert isinstance(out, ast.Module)
    return out


def _copy(node: Any) -> Any:
    if isinstance(node, ast.AST):
        new = node.__class__()
        for field, value in ast.iter_fields(node):
            setattr(new, field, _copy(value))
        for attr in node._attributes:
            if hasattr(node, attr):
                setattr(new, attr, getattr(node, attr))
        return new
    if isinstance(node, list):
        return [_copy(x) for x in node]
    return node  # str, int, None, ... : immutable


def snippet(code: str) -> Body:
    """Statements from source text (dedented)."""
    return ast.parse(textwrap.dedent(code)).body


def expr(code: str) -> ast.expr:
    return ast.parse(textwrap.dedent(code).strip(), mode="eval").body


def dotted(node: ast.AST | None) -> str | None:
    """``torch.optim.SGD`` for the attribute chain, ``x`` for a name, None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def is_call(node: ast.AST | None, *names: str) -> TypeGuard[ast.Call]:
    """A call of one of ``names`` (dotted); a name starting with ``.`` matches any receiver's method."""
    if not isinstance(node, ast.Call):
        return False
    d = dotted(node.func)
    if d is None:
        return isinstance(node.func, ast.Attribute) and any(n == "." + node.func.attr for n in names)
    return any(d == n or (n.startswith(".") and d.endswith(n)) for n in names)


def calls(tree: ast.AST, *names: str) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if is_call(n, *names)]


def kwarg(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def function(tree: ast.Module, name: str) -> ast.FunctionDef | None:
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def main_fn(tree: ast.Module) -> ast.FunctionDef | None:
    return function(tree, "main")


def bodies(node: ast.AST) -> Iterator[Body]:
    """Every list of statements under ``node`` (bodies, else branches, handlers, cases)."""
    for n in ast.walk(node):
        for f in ("body", "orelse", "finalbody"):
            v = getattr(n, f, None)
            if isinstance(v, list) and v and isinstance(v[0], ast.stmt):
                yield v


def locate(tree: ast.AST, stmt: ast.stmt) -> tuple[Body, int] | None:
    """The statement list holding ``stmt`` and its index there."""
    for body in bodies(tree):
        for i, s in enumerate(body):
            if s is stmt:
                return body, i
    return None






def stored(node: ast.AST) -> set[str]:
    """Names ``node`` binds: assignment targets, loop and with targets, defs, imports, handlers, args."""
    out: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            out.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            out |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, ast.ExceptHandler) and n.name:
            out.add(n.name)
        elif isinstance(n, ast.arg):
            out.add(n.arg)
    return out


def loaded(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def leaves_loop(stmt: ast.stmt) -> bool:
    """Whether ``stmt`` holds a ``break`` or ``continue`` of the loop around it (not of a loop, or in
    a function, inside it): a statement that cannot move into another loop or a function unchanged."""
    todo: list[ast.AST] = [stmt]
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Continue, ast.Break)):
            return True
        if not isinstance(node, (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef,
                                 ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))
    return False


def names(node: ast.AST) -> set[str]:
    return stored(node) | loaded(node)


def globals_of(tree: ast.Module) -> set[str]:
    """Names bound at module level (imports, constants, defs)."""
    out: set[str] = set()
    for s in tree.body:
        if isinstance(s, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)):
            out |= stored(s) if not isinstance(s, (ast.FunctionDef, ast.ClassDef)) else {s.name}
        elif isinstance(s, (ast.Assign, ast.AnnAssign)):
            for t in s.targets if isinstance(s, ast.Assign) else [s.target]:
                out |= stored(t)
    return out


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
           ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


def undefined(tree: ast.Module) -> set[str]:
    """Names read where no scope that can see them binds them (nor builtins): a script that would
    stop with NameError. Scopes as Python's: a function sees its own names, its enclosing
    functions' and the module's, never a class body's; a binding anywhere in a scope counts (a read
    before it is an UnboundLocalError, which this does not tell apart)."""
    declared_global = {g for n in ast.walk(tree) if isinstance(n, ast.Global) for g in n.names}
    missing: set[str] = set()
    _unbound_in(tree, declared_global & stored(tree), set(dir(builtins)) | {"__name__", "__file__"}, missing)
    return missing


def _unbound_in(scope: ast.AST, visible: set[str], builtin: set[str], missing: set[str]) -> None:
    binds, reads, children = _own(scope)
    here = visible | binds
    missing |= {n for n in reads if n not in here and n not in builtin}
    inner = visible if isinstance(scope, ast.ClassDef) else here  # a class body is no enclosing scope
    for child in children:
        _unbound_in(child, inner, builtin, missing)


def _own(scope: ast.AST) -> tuple[set[str], set[str], list[ast.AST]]:
    """What ``scope`` itself binds and reads, and the scopes directly inside it. A nested def's or
    class's name, decorators, defaults, annotations and bases belong to the scope around it; its
    arguments and body to its own."""
    binds: set[str] = set()
    reads: set[str] = set()
    children: list[ast.AST] = []
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        binds |= {a.arg for a in _args(scope.args)}
    if isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        todo: list[ast.AST] = list(scope.body)
    elif isinstance(scope, ast.Lambda):
        todo = [scope.body]
    elif isinstance(scope, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
        todo = [*scope.generators, *([scope.key, scope.value] if isinstance(scope, ast.DictComp) else [scope.elt])]
    else:
        todo = list(ast.iter_child_nodes(scope))
    while todo:
        n = todo.pop()
        if isinstance(n, _SCOPES):
            children.append(n)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                binds.add(n.name)
                todo += [*n.decorator_list, *getattr(n, "bases", []), *getattr(n, "keywords", [])]
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                todo += [*n.args.defaults, *[d for d in n.args.kw_defaults if d is not None],
                         *[a.annotation for a in _args(n.args) if a.annotation is not None]]
                if not isinstance(n, ast.Lambda) and n.returns is not None:
                    todo.append(n.returns)
            continue
        if isinstance(n, ast.Name):
            (reads if isinstance(n.ctx, ast.Load) else binds).add(n.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            binds |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, ast.ExceptHandler) and n.name:
            binds.add(n.name)
        todo.extend(ast.iter_child_nodes(n))
    return binds, reads, children


def _args(args: ast.arguments) -> list[ast.arg]:
    return [*args.posonlyargs, *args.args, *([args.vararg] if args.vararg else []), *args.kwonlyargs,
            *([args.kwarg] if args.kwarg else [])]


def fresh(tree: ast.AST, base: str) -> str:
    """``base``, or ``base_2``, ... : a name the tree does not use anywhere."""
    used = names(tree) | {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    name, i = base, 2
    while name in used:
        name, i = f"{base}_{i}", i + 1
    return name


def imported_as(tree: ast.Module, module: str, name: str | None = None) -> str | None:
    """The local name of ``import module`` (or of ``from module import name``), if the script has it."""
    for s in tree.body:
        if isinstance(s, ast.Import) and name is None:
            for a in s.names:
                if a.name == module:
                    return a.asname or a.name
        if isinstance(s, ast.ImportFrom) and name is not None and s.module == module:
            for a in s.names:
                if a.name == name:
                    return a.asname or a.name
    return None


def add_import(tree: ast.Module, module: str, name: str | None = None) -> str:
    """Import ``module`` (or ``name`` from it) unless already imported; the local name to use."""
    have = imported_as(tree, module, name)
    if have:
        return have
    local = name or module
    if local in names(tree):  # taken: import under a fresh alias
        local = fresh(tree, f"_{local.replace('.', '_')}")
    alias = None if local == (name or module) else local
    stmt = (ast.Import(names=[ast.alias(module, alias)]) if name is None
            else ast.ImportFrom(module=module, names=[ast.alias(name, alias)], level=0))
    last = max((i for i, s in enumerate(tree.body) if isinstance(s, (ast.Import, ast.ImportFrom))), default=-1)
    tree.body.insert(last + 1, stmt)
    return local


def insert_module_defs(tree: ast.Module, stmts: Body) -> None:
    """Module-level definitions placed just before ``def main`` (or at the end of the imports and
    constants, where there is no main)."""
    main = main_fn(tree)
    at = tree.body.index(main) if main is not None else len(tree.body)
    tree.body[at:at] = stmts




def is_constant_name(name: str) -> bool:
    return name.isupper() and name[0].isalpha()


# ---- the anchors of an exercise script ------------------------------------------------------------

def assigned_from(tree: ast.AST, *call_names: str) -> list[tuple[str, ast.Assign]]:
    """``(name, statement)`` for each ``name = <call of call_names>(...)``."""
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) \
                and is_call(n.value, *call_names):
            out.append((n.targets[0].id, n))
    return out


DDP_NAMES = ("DDP", "DistributedDataParallel", "torch.nn.parallel.DistributedDataParallel")


def ddp_assign(tree: ast.AST) -> tuple[str, ast.Assign] | None:
    """The model wrapped in DDP: ``model = DDP(model, ...)``."""
    found = assigned_from(tree, *DDP_NAMES)
    return found[0] if found else None


def optimizer_assign(tree: ast.AST) -> tuple[str, ast.Assign] | None:
    for n, s in assigned_from(tree, ".SGD", ".Adam", ".AdamW"):
        d = (dotted(s.value.func) if isinstance(s.value, ast.Call) else None) or ""  # (assigned from a call)
        if d.startswith(("torch.optim.", "optim.")):
            return n, s
    return None


def step_stmt(tree: ast.AST) -> ast.Expr | None:
    """The optimizer step: ``optimizer.step()`` or ``scaler.step(optimizer)``, as a statement."""
    opt = optimizer_assign(tree)
    if opt is None:
        return None
    for n in ast.walk(tree):
        if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call):
            d = dotted(n.value.func)
            if d == f"{opt[0]}.step" or (d and d.endswith(".step") and any(
                    isinstance(a, ast.Name) and a.id == opt[0] for a in n.value.args)):
                return n
    return None


def train_loop(tree: ast.AST) -> ast.For | ast.While | None:
    """The innermost loop whose own body holds the optimizer step."""
    s = step_stmt(tree)
    if s is None:
        return None
    for n in ast.walk(tree):
        if isinstance(n, (ast.For, ast.While)) and any(x is s for x in n.body):
            return n
    return None


def epoch_loop(tree: ast.AST) -> ast.For | None:
    return next((n for n in ast.walk(tree) if isinstance(n, ast.For) and isinstance(n.target, ast.Name)
                 and n.target.id == "epoch"), None)


def train_sampler(tree: ast.AST) -> str | None:
    """The name whose ``set_epoch`` the epoch loop calls."""
    for c in calls(tree, ".set_epoch"):
        d = dotted(c.func)
        if d and d.count(".") == 1:
            return d.split(".")[0]
    return None


def dataloaders(tree: ast.AST) -> list[ast.Call]:
    return calls(tree, "DataLoader", "torch.utils.data.DataLoader")


def train_loader(tree: ast.AST) -> ast.Call | None:
    """The DataLoader fed by the sampler the epoch loop re-seeds."""
    s = train_sampler(tree)
    for c in dataloaders(tree):
        v = kwarg(c, "sampler")
        if isinstance(v, ast.Name) and v.id == s:
            return c
    return None


def checkpoint_dicts(tree: ast.AST) -> list[ast.Dict]:
    """Dict literals with string keys that hold a ``.state_dict()``: the checkpoints the script writes."""
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Dict) and n.keys and all(isinstance(k, ast.Constant) and isinstance(k.value, str)
                                                      for k in n.keys):
            if any(is_call(v, ".state_dict") for v in n.values):
                out.append(n)
    return out


def loaded_checkpoints(tree: ast.AST) -> set[str]:
    """Names bound to ``torch.load(...)``: the checkpoint the script resumes from."""
    return {n for n, _ in assigned_from(tree, "torch.load")}


def strip_docstrings(tree: ast.Module) -> ast.Module:
    """``tree`` without its docstrings (changed in place, and returned)."""
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) and n.body \
                and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant) \
                and isinstance(n.body[0].value.value, str):
            n.body = n.body[1:] or [ast.Pass()]
    return tree


@lru_cache(maxsize=1024)
def program_key(source: str) -> str:
    """What a script does, as text: its tree without docstrings and without the annotations of its
    functions (two scripts that differ only in comments, docstrings, type hints or layout have the
    same key). Cached by source: generation asks it of every mutant three times (is it the reference,
    the broken script, a program made already), and the key of a text never changes."""
    tree = strip_docstrings(parse(source))
    for n in ast.walk(tree):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n.returns = None
            for a in [*n.args.posonlyargs, *n.args.args, *n.args.kwonlyargs]:
                a.annotation = None
    return ast.dump(tree)
