"""What a mutation is: a family of property-breaking changes of a reference fix (``Mutation``), each
generating the mutants it finds in one exercise's fix (``Mutant``: a name, what exactly changed,
the mutated source). The fix itself (``Fix``) is the broken script, the reference, and the hunks
of the broken-to-reference diff."""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass, field
from typing import ClassVar

from grader.validity.source import parse, program_key, undefined


@dataclass(frozen=True)
class Hunk:
    index: int  # 1-based, in the diff's order
    broken: tuple[int, int]  # [start, stop) line indices (0-based) in the broken script
    ref: tuple[int, int]  # the same in the reference

    def label(self, fix: Fix) -> str:
        a, b = self.ref
        where = f"line {a + 1}" if b - a == 1 else f"lines {a + 1}-{b}" if b > a else f"after line {a}"
        first = next((x.strip() for x in fix.ref_lines[a:b] if x.strip() and not x.strip().startswith("#")), None) or \
            next((x.strip() for x in fix.broken_lines[self.broken[0]:self.broken[1]] if x.strip()), "")
        return f"{where}: `{first[:70]}`"


@dataclass
class Fix:
    broken: str
    ref: str
    broken_lines: list[str] = field(init=False)
    ref_lines: list[str] = field(init=False)
    hunks: list[Hunk] = field(init=False)
    ref_key: str = field(init=False)  # the reference as a program (``program_key``)
    broken_key: str = field(init=False)  # the broken script as a program

    def __post_init__(self) -> None:
        self.ref_key = program_key(self.ref)
        self.broken_key = program_key(self.broken)
        self.broken_lines = self.broken.splitlines(keepends=True)
        self.ref_lines = self.ref.splitlines(keepends=True)
        sm = difflib.SequenceMatcher(None, self.broken_lines, self.ref_lines, autojunk=False)
        ops = [op for op in sm.get_opcodes() if op[0] != "equal"]
        self.hunks = [Hunk(i + 1, (a0, a1), (b0, b1)) for i, (_, a0, a1, b0, b1) in enumerate(ops)]

    @property
    def ref_tree(self) -> ast.Module:
        return parse(self.ref)

    @property
    def broken_tree(self) -> ast.Module:
        return parse(self.broken)

    def revert(self, hunks: list[Hunk]) -> str:
        """The reference with ``hunks`` replaced by the broken script's lines."""
        lines = list(self.ref_lines)
        for h in sorted(hunks, key=lambda h: -h.ref[0]):
            lines[h.ref[0]:h.ref[1]] = self.broken_lines[h.broken[0]:h.broken[1]]
        return "".join(lines)

    def fix_lines(self) -> set[int]:
        """1-based line numbers of the reference that the fix added or changed."""
        return {i + 1 for h in self.hunks for i in range(*h.ref)}

    def text(self, h: Hunk) -> str:
        return "".join(self.ref_lines[h.ref[0]:h.ref[1]]) + "".join(self.broken_lines[h.broken[0]:h.broken[1]])


@dataclass
class Mutant:
    name: str  # unique in the exercise: "revert-hunk-2", "drop-line-106", "static-loss-scale"
    family: str
    detail: str  # what exactly changed, in words
    source: str
    touches: str = ""  # a line of the reference this mutant changes (the config's guard against renumbering)


@dataclass
class Skipped:
    """A mutant a family found but did not generate, and why (shown by ``--list``)."""

    name: str
    why: str


class Mutation:
    name: ClassVar[str]
    breaks: ClassVar[str]  # what the family breaks, in a phrase

    def generate(self, fix: Fix) -> tuple[list[Mutant], list[Skipped]]:
        raise NotImplementedError


def problem(source: str, fix: Fix) -> str | None:
    """Why a mutated source is not a mutant worth grading: it does not parse, it is the reference
    or the broken script again (every change of the fix undone: no partial fix, and ``trainwreck
    verify`` grades the broken script already), or it reads a name nothing binds (a NameError, not a
    partial fix)."""
    try:
        tree = parse(source)
    except SyntaxError as e:
        return f"does not parse ({e.msg}, line {e.lineno})"
    if program_key(source) == fix.ref_key:
        return "the same program as the reference (comments, docstrings or type hints only)"
    if program_key(source) == fix.broken_key:
        return ("the same program as the broken script (every change of the fix undone): no partial fix, and "
                "trainwreck verify grades the broken script as shipped")
    gone = sorted(undefined(tree))
    if gone:
        return f"leaves {', '.join(gone)} undefined: a NameError, not a partial fix"
    return None


def keep(mutant: Mutant, fix: Fix, out: list[Mutant], skipped: list[Skipped]) -> None:
    """Add ``mutant`` to ``out``, or to ``skipped`` with why it is no mutant worth grading."""
    why = problem(mutant.source, fix)
    if why:
        skipped.append(Skipped(mutant.name, why))
    else:
        out.append(mutant)


def canonical(source: str) -> str:
    return program_key(source)


def word_in(name: str, text: str) -> bool:
    return re.search(rf"\b{re.escape(name)}\b", text) is not None
