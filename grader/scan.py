"""A static scan of a submission's source for what a fix has no reason to touch: the kit's internals,
the harness's environment, other processes, the reference and the grader's files, the
interpreter's hooks. It reads the AST (nothing is run) and returns one finding per line; they
become flags in result.json, for the interviewer to read. A finding never changes a verdict by
itself: an honest script may have a reason (a debugging ``sys.settrace`` left in), and what the
sandbox and the checks stop does not depend on it.

What is looked for (names are resolved through the file's imports, so ``import torch as t;
t.save = f`` is seen as ``torch.save``):

- imports of the kit's internals: any ``harness`` module but ``harness.workloads`` (the one scripts
  are meant to import), anything of ``grader``; ``ctypes``;
- ``gc.get_objects``, ``sys.settrace`` / ``sys.setprofile`` (and ``threading``'s): reaching other
  code's objects and frames;
- strings naming ``/proc``, the harness's ``TRAINWRECK_*`` variables, or paths through
  ``solutions``, ``.trainwreck``, ``cache``, ``site-packages`` or ``usercustomize`` /
  ``sitecustomize``;
- the kit's datasets' storage (``.x``, ``.y`` of a kit dataset, ``.seqs``, ``._blob``, ``._y``):
  reading data without going through the ledger. A dataset class the file defines itself is the
  script's own, under whatever name (the exercises define theirs): its storage is not flagged;
- assignments (or ``setattr``) that replace ``torch.save``, ``torch.load``, an optimizer's
  ``step``, ``backward``, or anything of the kit's classes and modules;
- ``exec`` / ``eval`` / ``compile`` of something other than a literal, ``__import__`` and
  ``importlib.import_module`` of a name that is not a literal.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

KIT_PACKAGES = ("harness", "grader")
ALLOWED_KIT_MODULES = {"harness.workloads"}
KIT_DATASETS = {"SyntheticRegression", "SyntheticTokens", "SensorRecords"}
DATASET_STORAGE = {"seqs", "_blob", "_y", "_stride"}  # private to the kit's datasets whatever holds them
DATASET_XY = {"x", "y"}  # flagged on a kit dataset (a name bound to one, or ``.dataset``)
PATH_NAMES = {"solutions", ".trainwreck", "cache", ".cache", "site-packages", "dist-packages"}
HOOK_FILES = ("usercustomize", "sitecustomize")
PATCHED = {"torch.save", "torch.load", "torch.serialization.save", "torch.serialization.load",
           "torch.Tensor.backward", "torch.autograd.backward", "torch.nn.Module.__call__",
           "torch.utils.data.DataLoader.__iter__"}
MAX_SOURCE = 4 * 2**20  # a script is kilobytes; a bigger file is scanned no further than this


@dataclass(frozen=True)
class Finding:
    file: str
    line: int
    what: str

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


class _Scanner(ast.NodeVisitor):
    def __init__(self, file: str, own_classes: frozenset[str] = frozenset(), own_attrs: frozenset[str] = frozenset()):
        self.file = file
        self.own_classes = own_classes  # classes the file defines: its own datasets, whatever their names
        self.own_attrs = own_attrs  # attributes its own classes set on self
        self.found: list[Finding] = []
        self.alias: dict[str, str] = {}  # local name -> qualified name it was imported as
        self.datasets: set[str] = set()  # names bound to a kit dataset

    def add(self, node: ast.AST, what: str) -> None:
        self.found.append(Finding(self.file, getattr(node, "lineno", 0), what))

    # -- names -------------------------------------------------------------------------------
    def qualified(self, node: ast.AST) -> str | None:
        """``torch.optim.SGD.step`` for an attribute chain, through the imports' aliases."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        parts.append(self.alias.get(node.id, node.id))
        return ".".join(reversed(parts))

    def _kit_import(self, node: ast.AST, module: str) -> None:
        top = module.split(".")[0]
        if top in KIT_PACKAGES and module not in ALLOWED_KIT_MODULES:
            self.add(node, f"imports {module} (the kit's internals; scripts import only harness.workloads)")
        elif top == "ctypes":
            self.add(node, "imports ctypes (raw memory and C calls)")

    # -- imports ------------------------------------------------------------------------------
    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            if a.asname:
                self.alias[a.asname] = a.name
            self._kit_import(node, a.name)
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        mod = "." * node.level + (node.module or "")
        for a in node.names:
            full = f"{mod}.{a.name}" if mod else a.name
            self.alias[a.asname or a.name] = full
            if node.level:
                continue
            if mod.split(".")[0] in KIT_PACKAGES:
                # ``from harness import workloads`` is harness.workloads; ``from harness.workloads
                # import MLP`` is too; anything else of the kit is its internals
                target = full if mod in KIT_PACKAGES else mod
                self._kit_import(node, target)
            elif mod == "ctypes" or mod.startswith("ctypes."):
                self._kit_import(node, "ctypes")
            elif full in ("gc.get_objects", "sys.settrace", "sys.setprofile"):
                self.add(node, f"imports {full}")
        self.generic_visit(node)

    # -- calls --------------------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        name = self.qualified(node.func)
        first = node.args[0] if node.args else None
        text = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else None
        literal = text is not None
        if name in ("exec", "eval", "compile") and node.args and not literal:
            self.add(node, f"{name}() of code that is not a literal")
        elif name in ("__import__", "importlib.import_module", "importlib.__import__"):
            if text is None:
                self.add(node, f"{name}() of a name that is not a literal")
            else:
                self._kit_import(node, text)
        elif name in ("gc.get_objects", "gc.get_referrers", "gc.get_referents"):
            self.add(node, f"calls {name}() (every object of the process, the harness's included)")
        elif name in ("sys.settrace", "sys.setprofile", "threading.settrace", "threading.setprofile",
                      "sys.monitoring.register_callback"):
            self.add(node, f"calls {name}() (a hook into every frame, the harness's included)")
        elif name == "setattr" and len(node.args) >= 2:
            target = self.qualified(node.args[0])
            attr = node.args[1].value if isinstance(node.args[1], ast.Constant) else None
            if target is not None:
                self._patched(node, f"{target}.{attr}" if isinstance(attr, str) else target, via="setattr")
        self.generic_visit(node)

    # -- assignments ----------------------------------------------------------------------------
    def _patched(self, node: ast.AST, name: str, via: str = "assigns") -> None:
        kit_class = name.split(".")[0] in KIT_PACKAGES and name.count(".") >= 2
        optimizer_step = name.startswith("torch.optim.") and name.rsplit(".", 1)[-1] in ("step", "zero_grad")
        if name in PATCHED or optimizer_step or kit_class:
            what = "replaces" if via == "assigns" else "replaces (setattr)"
            self.add(node, f"{what} {name}")

    def _targets(self, node: ast.AST, targets: Sequence[ast.expr], value: ast.AST | None) -> None:
        for t in targets:
            if isinstance(t, ast.Attribute):
                name = self.qualified(t)
                if name is not None:
                    self._patched(node, name)
            elif isinstance(t, ast.Name) and value is not None:
                call = value.func if isinstance(value, ast.Call) else None
                built = self.qualified(call) if call is not None else None
                if built and built.rsplit(".", 1)[-1] in KIT_DATASETS and built not in self.own_classes:
                    self.datasets.add(t.id)
            elif isinstance(t, (ast.Tuple, ast.List)):
                self._targets(node, t.elts, None)

    def visit_Assign(self, node: ast.Assign) -> None:
        self._targets(node, node.targets, node.value)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._targets(node, [node.target], node.value)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._targets(node, [node.target], None)
        self.generic_visit(node)

    # -- attributes and strings -----------------------------------------------------------------
    def visit_Attribute(self, node: ast.Attribute) -> None:
        if isinstance(node.ctx, ast.Load):
            owner = node.value
            if node.attr in DATASET_STORAGE and node.attr not in self.own_attrs:
                self.add(node, f"reads .{node.attr} (a kit dataset's storage, past its sample ledger)")
            elif node.attr in DATASET_XY and (
                    (isinstance(owner, ast.Name) and owner.id in self.datasets)
                    or (isinstance(owner, ast.Attribute) and owner.attr == "dataset")):
                self.add(node, f"reads .{node.attr} of a kit dataset (its storage, past its sample ledger)")
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            what = _string_finding(node.value)
            if what:
                self.add(node, what)

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        for v in node.values:  # the literal parts of an f-string
            if isinstance(v, ast.Constant) and isinstance(v.value, str):
                what = _string_finding(v.value, fragment=True)
                if what:
                    self.add(node, what)
            else:
                self.visit(v)

    def visit_BinOp(self, node: ast.BinOp) -> None:
        # Path("x") / "solutions", os.path.join(x, "cache"): a bare folder name in a path
        if isinstance(node.op, ast.Div):
            for side in (node.left, node.right):
                if isinstance(side, ast.Constant) and isinstance(side.value, str) and side.value in PATH_NAMES:
                    self.add(node, f"builds a path through {side.value!r}")
        self.generic_visit(node)


def _string_finding(s: str, fragment: bool = False) -> str | None:
    if len(s) > 4096:
        s = s[:4096]
    if s.startswith("/proc") or "/proc/" in s:
        return f"names {_short(s)} (other processes' memory, environment and files)"
    if s.startswith("TRAINWRECK_") or (fragment and "TRAINWRECK_" in s):
        return f"names {_short(s)} (the harness's environment)"
    if any(h in s for h in HOOK_FILES):
        return f"names {_short(s)} (a file Python runs at every start)"
    if "/" in s or "\\" in s:
        parts = set(s.replace("\\", "/").split("/"))
        hit = sorted(parts & PATH_NAMES)
        if hit:
            return f"names the path {_short(s)} (through {hit[0]!r}: not the submission's files)"
    return None


def _short(s: str) -> str:
    s = "".join(ch if 32 <= ord(ch) < 127 else "?" for ch in s)
    return repr(s if len(s) <= 60 else s[:57] + "...")


class _PathCalls(ast.NodeVisitor):
    """os.path.join(..., "cache"), Path(..., "solutions"): bare folder names given to path calls."""

    def __init__(self, scanner: _Scanner):
        self.s = scanner

    def visit_Call(self, node: ast.Call) -> None:
        name = self.s.qualified(node.func) or ""
        if name.rsplit(".", 1)[-1] in ("join", "Path", "PurePath", "joinpath", "open", "listdir", "scandir",
                                       "glob", "rglob", "walk"):
            for a in node.args:
                if isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value in PATH_NAMES:
                    self.s.add(node, f"builds a path through {a.value!r}")
        self.generic_visit(node)


def _self_attributes(classes: list[ast.ClassDef]) -> frozenset[str]:
    """The attributes the file's own classes assign on ``self`` (``self.seqs = ...``, ``self.x, self.y = ...``)."""
    out = set()
    for c in classes:
        for n in ast.walk(c):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AnnAssign) else []
            for t in targets:
                for e in t.elts if isinstance(t, ast.Tuple) else [t]:
                    if isinstance(e, ast.Attribute) and isinstance(e.value, ast.Name) and e.value.id == "self":
                        out.add(e.attr)
    return frozenset(out)


def scan_source(source: str | bytes, file: str = "<submission>") -> list[Finding]:
    """Findings in one file's source, in line order, one per (line, what)."""
    try:
        tree = ast.parse(source, filename=file)
    except (SyntaxError, ValueError):
        return []  # the grader refuses such a file before anything runs
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    s = _Scanner(file, frozenset(c.name for c in classes), _self_attributes(classes))
    s.visit(tree)
    _PathCalls(s).visit(tree)
    seen, out = set(), []
    for f in sorted(s.found, key=lambda f: (f.line, f.what)):
        if (f.line, f.what) not in seen:
            seen.add((f.line, f.what))
            out.append(f)
    return out


def scan_files(root: Path, names: list[str]) -> list[Finding]:
    """Findings in the submission's editable Python files (``names``, relative to ``root``)."""
    out = []
    for name in names:
        path = Path(root) / name
        if not name.endswith(".py") or not path.is_file():
            continue
        with open(path, "rb") as f:
            out += scan_source(f.read(MAX_SOURCE), name)
    return out
