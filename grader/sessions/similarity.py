"""How close a submission is to the reference fix, or to another candidate's submission.

A whole-file similarity says nothing here: the broken script and the reference differ by a few
lines, so any submission, the unfixed script included, is 74-99% like the reference. What tells a
copy from a fix is the *edit*: of the tokens the candidate changed, and the tokens the other side
changed, how many did they change the same way? ``closeness`` is

    1 - d(x, y) / max(d(shipped, x), d(shipped, y))

with d a token edit distance over the editable files, comments, docstrings and whitespace left
out (so re-indenting or re-commenting a copy changes nothing). The unfixed script scores 0 against
the reference, the reference itself 1, an independent fix at most a fraction (a different edit
is far from it); it can go below 0 where the two edits conflict. Measured on the variant corpus
(docs/design.md has the table), the threshold sits between the valid fixes and a copy.
"""

from __future__ import annotations

import difflib
import io
import tokenize
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

THRESHOLD = 0.9  # flag at or above; see docs/design.md for the margins measured on the corpus
MIN_EDIT = 8  # tokens: an edit smaller than this (one call added) is the same in any correct fix
_SKIP = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
         tokenize.ENCODING, tokenize.ENDMARKER}


Line = tuple[str, ...]


def lines(text: str) -> list[Line]:
    """The source's logical lines as tokens, without comments, docstrings, indentation and blank
    lines. Text that does not tokenize (a half-edited file) falls back to its lines' words."""
    try:
        toks = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return [tuple(ln.split()) for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    out: list[Line] = []
    cur: list[tokenize.TokenInfo] = []
    for t in toks:
        if t.type == tokenize.NEWLINE or t.type == tokenize.ENDMARKER:
            # a string standing alone as a statement is a docstring (or a comment written as one)
            if cur and not (len(cur) == 1 and cur[0].type == tokenize.STRING):
                out.append(tuple(u.string for u in cur))
            cur = []
        elif t.type not in _SKIP:
            cur.append(t)
    return out


def tokens(text: str) -> list[str]:
    return [t for line in lines(text) for t in line]


def _token_distance(a: list[str], b: list[str]) -> int:
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    return sum(max(i2 - i1, j2 - j1) for op, i1, i2, j1, j2 in sm.get_opcodes() if op != "equal")


def distance(a: list[Line], b: list[Line]) -> int:
    """Tokens inserted, deleted or replaced to turn ``a`` into ``b``: lines matched first (fast on
    whole files), then tokens within each changed block."""
    sm = difflib.SequenceMatcher(None, a, b, autojunk=False)
    total = 0
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op != "equal":
            total += _token_distance([t for ln in a[i1:i2] for t in ln], [t for ln in b[j1:j2] for t in ln])
    return total


Files = dict[str, str]


# `session show --watch` builds the view again every few seconds: the pairs already measured are
# taken from here, so a refresh measures only the attempts graded since (texts are the keys)
@lru_cache(maxsize=1024)
def _lines_of(text: str) -> tuple[Line, ...]:
    return tuple(lines(text))


@lru_cache(maxsize=4096)
def _file_distance(a: str, b: str) -> int:
    return distance(list(_lines_of(a)), list(_lines_of(b)))


def _d(x: Files, y: Files) -> int:
    return sum(_file_distance(x.get(n, ""), y.get(n, "")) for n in sorted(set(x) | set(y)))


class Comparer:
    """Closeness of file sets to one another, all edits measured from the shipped files."""

    def __init__(self, shipped: Files):
        self._shipped = shipped

    def edit(self, files: Files) -> int:
        """The size of the edit from the shipped files, in tokens."""
        return _d(self._shipped, files)

    def closeness(self, x: Files, y: Files) -> float | None:
        """1: the same edit; 0: as far from ``y`` as the shipped files are; None where neither
        side changed enough to tell (below ``MIN_EDIT`` tokens)."""
        base = max(self.edit(x), self.edit(y))
        if base < MIN_EDIT:
            return None
        return 1.0 - _d(x, y) / base

    def ratio(self, x: Files, y: Files) -> float:
        """difflib's whole-file ratio over the same tokens (reported beside closeness, to show why
        it is not the figure used)."""
        a = [t for n in sorted(x) for t in (f"<{n}>", *tokens(x[n]))]
        b = [t for n in sorted(y) for t in (f"<{n}>", *tokens(y[n]))]
        return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


@dataclass(frozen=True)
class Other:
    """A file set to compare against: the reference, or another session's attempt."""

    group: str  # "reference", or "session <id> (<candidate>)": one match per group is enough
    label: str  # how a line names it: "reference", "session <id> (<candidate>) #<n>"
    files: Files


@dataclass(frozen=True)
class Match:
    """A submission close to the reference, or to another session's, for the interviewer."""

    attempt: int  # this session's attempt number
    other: str  # Other.label
    closeness: float
    edit: int  # tokens this attempt changed from the shipped files (a small edit is weak evidence)

    @property
    def line(self) -> str:
        return f"#{self.attempt} makes the edit of the {self.other}: closeness {self.closeness:.2f}, {self.edit} tokens"

    def to_json(self) -> dict[str, Any]:
        return {"attempt": self.attempt, "other": self.other, "closeness": round(self.closeness, 3),
                "edit_tokens": self.edit, "threshold": THRESHOLD}


def matches(shipped: Files, mine: list[tuple[int, Files]], others: list[Other],
            threshold: float = THRESHOLD) -> list[Match]:
    """The attempts of ``mine`` (number, files) at or above ``threshold`` against any of
    ``others``: per group, the closest pair (ties: the latest attempt)."""
    cmp = Comparer(shipped)
    best: dict[str, Match] = {}
    for n, files in mine:
        for o in others:
            c = cmp.closeness(files, o.files)
            if c is None or c < threshold:
                continue
            m = Match(n, o.label, c, cmp.edit(files))
            if o.group not in best or c >= best[o.group].closeness:
                best[o.group] = m
    return sorted(best.values(), key=lambda m: (-m.closeness, m.attempt))
