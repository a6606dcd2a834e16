"""What a rewrite is: one semantics-preserving change of a script, with a name, one line on why the
job it runs is the same job, ``applies(tree)`` (the script has what it changes) and
``apply(tree)`` (a new tree; the one given is never changed)."""

from __future__ import annotations

import ast
from typing import ClassVar, TypeVar

from grader.validity.source import clone

_T = TypeVar("_T")


class MissingNode(RuntimeError):
    """``change`` did not find what ``applies`` found: a bug in the rewrite, not in the script."""


def found(value: _T | None, what: str) -> _T:
    """What ``applies`` already found (``apply`` runs ``change`` only where it did), typed as present."""
    if value is None:
        raise MissingNode(f"{what} is missing, though applies() found it")
    return value


def found_as(node: object, kind: type[_T], what: str) -> _T:
    """``node`` as the kind of node ``applies`` (or the rewrite's own snippet) makes sure it is."""
    if not isinstance(node, kind):
        raise MissingNode(f"{what} is a {type(node).__name__}, not the {kind.__name__} applies() found")
    return node


def found_call(stmt: object, what: str) -> ast.Call:
    """The call an expression statement (``f(x)`` on a line of its own) makes."""
    return found_as(found_as(stmt, ast.Expr, what).value, ast.Call, what)


class Rewrite:
    name: ClassVar[str]
    why: ClassVar[str]  # one line: why the rewritten script trains the same model on the same data
    # rewrites that cannot both be applied to one script (the second would undo or collide with the
    # first); a composition keeps the first of them in library order
    conflicts: ClassVar[tuple[str, ...]] = ()

    def applies(self, tree: ast.Module) -> bool:
        raise NotImplementedError

    def change(self, tree: ast.Module) -> None:
        """Rewrite ``tree`` in place (``apply`` hands it a copy)."""
        raise NotImplementedError

    def apply(self, tree: ast.Module) -> ast.Module:
        if not self.applies(tree):
            raise ValueError(f"rewrite {self.name} does not apply to this script")
        out = clone(tree)
        self.change(out)
        return ast.fix_missing_locations(out)

    def __repr__(self) -> str:
        return f"<rewrite {self.name}>"
