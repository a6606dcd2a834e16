"""Mutations computed from the fix itself (the broken-to-reference diff): revert one hunk (with the
hunks it cannot run without), drop one line of the fix, apply a hunk on rank 0 only or in the first
epoch only, and catch the collective's timeout and go on."""

from __future__ import annotations

import ast
from typing import ClassVar

from grader.validity.mutations.base import Fix, Hunk, Mutant, Mutation, Skipped, keep, problem, word_in
from grader.validity.source import (
    bodies,
    epoch_loop,
    expr,
    is_call,
    loaded,
    main_fn,
    parse,
    render,
    snippet,
    stored,
    undefined,
)


def revert_groups(fix: Fix) -> list[tuple[Hunk, list[Hunk]]]:
    """Each hunk with the hunks its revert cannot run without: a revert that leaves a name undefined
    takes in the hunks that mention that name, until nothing is undefined."""
    out = []
    for h in fix.hunks:
        group = [h]
        while True:
            try:
                gone = undefined(parse(fix.revert(group)))
            except SyntaxError:
                break
            more = [k for k in fix.hunks if k not in group and any(word_in(n, fix.text(k)) for n in gone)]
            if not gone or not more:
                break
            group += more
        out.append((h, sorted(group, key=lambda k: k.index)))
    return out


def _touch(fix: Fix, h: Hunk) -> str:
    a, b = h.ref
    lines = fix.ref_lines[a:b] or fix.broken_lines[h.broken[0]:h.broken[1]]
    return next((x.strip() for x in lines if x.strip() and not x.strip().startswith("#")), "")


class RevertHunk(Mutation):
    name = "revert-hunk"
    breaks = "one change of the fix undone: the property that change restores"

    def generate(self, fix: Fix) -> tuple[list[Mutant], list[Skipped]]:
        out: list[Mutant] = []
        skipped: list[Skipped] = []
        done: set[str] = set()  # two hunks that need each other make one group, reverted once
        for h, group in revert_groups(fix):
            name = f"revert-hunk-{h.index}" if len(group) == 1 else "revert-hunks-" + "-".join(
                str(k.index) for k in group)
            if name in done:
                continue
            done.add(name)
            if len(group) == len(fix.hunks) and len(group) > 1:
                skipped.append(Skipped(name, "its revert needs every other hunk: that is the broken script"))
                continue
            what = "; ".join(k.label(fix) for k in group)
            keep(Mutant(name, self.name, f"reverts {what}", fix.revert(group), _touch(fix, h)), fix, out, skipped)
        return out, skipped


def _docstring_ids(tree: ast.Module) -> set[int]:
    return {id(n.body[0]) for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef))
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}


class DropLine(Mutation):
    name = "drop-line"
    breaks = "one statement of the fix left out (a guard or a with block unwrapped): what it was there for"

    def generate(self, fix: Fix) -> tuple[list[Mutant], list[Skipped]]:
        tree, lines = fix.ref_tree, fix.fix_lines()
        docs = _docstring_ids(tree)
        out, skipped = [], []
        seen: set[int] = set()
        for body in bodies(tree):
            for s in body:
                if s.lineno not in lines or s.lineno in seen or id(s) in docs:
                    continue
                if isinstance(s, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef, ast.Pass, ast.For,
                                  ast.While, ast.Try, ast.Return)):
                    continue
                if _log_only([s]) or isinstance(s, (ast.If, ast.With)) and _log_only(s.body):
                    continue  # a log line, or a guard around log lines only: no property hangs on it
                seen.add(s.lineno)
                name = f"drop-line-{s.lineno}"
                src = _without(fix.ref, s)
                why = problem(src, fix)
                if why:
                    skipped.append(Skipped(name, why))
                    continue
                how = "unwraps" if isinstance(s, (ast.If, ast.With)) else "drops"
                text = fix.ref_lines[s.lineno - 1].strip()
                out.append(Mutant(name, self.name, f"{how} line {s.lineno}: `{text[:70]}`", src, text))
        return out, skipped


def _log_only(stmts: list[ast.stmt]) -> bool:
    return all(isinstance(s, ast.Expr) and is_call(s.value, "print", ".info", ".warning") for s in stmts)


def _without(source: str, stmt: ast.stmt) -> str:
    """``source`` without ``stmt`` (a with or if statement: its body in its place)."""
    tree = parse(source)
    for body in bodies(tree):
        for i, s in enumerate(body):
            if s.lineno == stmt.lineno and type(s) is type(stmt):
                repl = s.body if isinstance(s, (ast.If, ast.With)) else []
                body[i:i + 1] = repl
                if not body:
                    body.append(ast.Pass())
                return render(tree)
    raise ValueError(f"no statement at line {stmt.lineno}")


def _end(s: ast.stmt) -> int:
    """A statement's last line (a parsed statement always has one; a built one ends where it starts)."""
    return s.end_lineno if s.end_lineno is not None else s.lineno


def _span(tree: ast.Module, lines: list[str], first: int, last: int,
          docs: set[int]) -> tuple[list[ast.stmt], list[ast.stmt]] | None:
    """The consecutive statements of one body that cover every code line of ``first..last``
    (1-based), the innermost such; and that body."""
    code = {i for i in range(first, last + 1) if lines[i - 1].strip() and not lines[i - 1].strip().startswith("#")}
    best = None
    for body in bodies(tree):
        idx = [i for i, s in enumerate(body) if s.lineno <= last and _end(s) >= first and id(s) not in docs]
        if not idx:
            continue
        cand = body[idx[0]:idx[-1] + 1]
        covered = {i for s in cand for i in range(s.lineno, _end(s) + 1)}
        if not code <= covered:
            continue
        size = _end(cand[-1]) - cand[0].lineno
        if best is None or size <= best[0]:
            best = (size, cand, body)
    return (best[1], best[2]) if best else None


def _code_lines(lines: list[str], a: int, b: int) -> tuple[int, int] | None:
    """First and last line (1-based) in ``[a, b)`` holding code, not blank or comment."""
    code = [i + 1 for i in range(a, b) if lines[i].strip() and not lines[i].strip().startswith("#")]
    return (code[0], code[-1]) if code else None


class _Guarded(Mutation):
    """A hunk's fixed statements under a condition, the broken ones otherwise."""

    where: ClassVar[str]  # the condition, in words ("on rank 0")

    def test(self, fix: Fix, stmts: list[ast.stmt]) -> str | None:
        raise NotImplementedError

    def generate(self, fix: Fix) -> tuple[list[Mutant], list[Skipped]]:
        out, skipped, done = [], [], set()
        for h in fix.hunks:
            name = f"{self.name}-hunk-{h.index}"
            ref_span = _code_lines(fix.ref_lines, *h.ref)
            if ref_span is None:
                continue
            tree, btree = fix.ref_tree, fix.broken_tree
            docs, bdocs = _docstring_ids(tree), _docstring_ids(btree)
            got = _span(tree, fix.ref_lines, *ref_span, docs)
            if got is None:
                continue
            stmts, body = got
            first, last = stmts[0].lineno, _end(stmts[-1])
            if (first, last) in done or not _in_function(tree, stmts[0]):
                continue
            # the broken script's lines for the same statements: outside the hunk the files are equal
            bfirst = first + h.broken[0] - h.ref[0] if first <= h.ref[0] else h.broken[0] + 1
            blast = last + h.broken[1] - h.ref[1] if last > h.ref[1] else h.broken[1]
            bstmts = []
            if bfirst <= blast:
                bgot = _span(btree, fix.broken_lines, bfirst, blast, bdocs)
                if bgot is None or bgot[0][0].lineno < bfirst or _end(bgot[0][-1]) > blast:
                    skipped.append(Skipped(name, "the broken script's lines there are not whole statements of one "
                                                 "block"))
                    continue
                bstmts = bgot[0]
            cond = self.test(fix, stmts)
            if cond is None:
                skipped.append(Skipped(name, f"its statements are not {self.where}"))
                continue
            unbound = _only_here(body, stmts, bstmts)
            if unbound:
                skipped.append(Skipped(name, f"binds {', '.join(unbound)}, read later: the other branch would stop "
                                             "with a NameError"))
                continue
            new = ast.If(expr(cond), stmts, bstmts)
            i = next(i for i, s in enumerate(body) if s is stmts[0])
            body[i:i + len(stmts)] = [new]
            taken = _take_back_definitions(tree, fix, stmts[0])
            src = render(tree)
            why = problem(src, fix)
            if why:
                skipped.append(Skipped(name, why))
                continue
            done.add((first, last))
            text = fix.ref_lines[first - 1].strip()
            back = f" (with {', '.join(taken)} taken back from the broken script)" if taken else ""
            out.append(Mutant(name, self.name, f"lines {first}-{last} (`{text[:60]}`) only {self.where}, "
                              f"the broken script's otherwise{back}", src, text))
        return out, skipped


def _take_back_definitions(tree: ast.Module, fix: Fix, inside: ast.stmt) -> list[str]:
    """The module-level functions and classes of the broken script that the fix removed and the
    mutant's broken branch reads again, put back before the definition holding ``inside`` (with
    what they read in turn); their names. A fix that replaces a class deletes it, and the branch
    that keeps the bug needs it: it is the bug, not a partial fix's NameError."""
    defs = {s.name: s for s in fix.broken_tree.body if isinstance(s, ast.FunctionDef | ast.ClassDef)}
    order = list(defs)
    taken: list[str] = []
    while gone := sorted(undefined(tree) & defs.keys() - set(taken), key=order.index):
        at = next(i for i, s in enumerate(tree.body) if any(n is inside for n in ast.walk(s)))
        tree.body[at:at] = [defs[n] for n in gone]
        taken += gone
    return sorted(taken, key=order.index)


def _in_function(tree: ast.Module, stmt: ast.stmt) -> bool:
    return not isinstance(stmt, (ast.FunctionDef, ast.ClassDef)) and any(
        isinstance(f, ast.FunctionDef) and any(s is stmt for s in ast.walk(f) if s is not f) for f in ast.walk(tree))


def _only_here(body: list[ast.stmt], stmts: list[ast.stmt], other: list[ast.stmt]) -> list[str]:
    mine = set().union(*(stored(s) for s in stmts)) - set().union(*(stored(s) for s in other))
    rest = [s for s in body if not any(s is x for x in stmts)]
    used = set().union(*(loaded(s) for s in rest)) if rest else set()
    return sorted(mine & used)


class Rank0Only(_Guarded):
    name = "rank0-only"
    breaks = "the fix applied on rank 0 only: the other ranks keep the bug"
    where = "on rank 0"

    def test(self, fix: Fix, stmts: list[ast.stmt]) -> str | None:
        return "dist.get_rank() == 0"


class FirstEpochOnly(_Guarded):
    name = "first-epoch-only"
    breaks = "the fix applied in the first epoch only: later epochs keep the bug"
    where = "in the first epoch"

    def test(self, fix: Fix, stmts: list[ast.stmt]) -> str | None:
        loop = epoch_loop(fix.ref_tree)
        if loop is None or not any(stmts[0].lineno == s.lineno for s in ast.walk(loop) if isinstance(s, ast.stmt)
                                   and s is not loop):
            return None
        args = loop.iter.args if is_call(loop.iter, "range") else []
        start = ast.unparse(args[0]) if len(args) >= 2 else "0"
        return f"epoch == {start}"


COLLECTIVES = ("dist.all_reduce", "dist.barrier", "dist.broadcast", "dist.all_gather", "dist.reduce",
               "dist.all_gather_object", "dist.gather", "dist.reduce_scatter")


def _collective_fns(tree: ast.Module) -> set[str]:
    """Module functions that call a collective, directly or through another such function."""
    fns = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
    out = {n for n, f in fns.items() if any(is_call(c, *COLLECTIVES) for c in ast.walk(f))}
    while True:
        more = {n for n, f in fns.items() if n not in out and any(is_call(c, *out) for c in ast.walk(f))}
        if not more:
            return out
        out |= more


def _guarded_collective_calls(tree: ast.Module) -> list[ast.stmt]:
    """Statements in main calling a collective function under a rank guard (``if master_process``)."""
    main, fns = main_fn(tree), _collective_fns(tree)
    out: list[ast.stmt] = []
    if main is None:
        return out
    for n in ast.walk(main):
        if isinstance(n, ast.If) and loaded(n.test) & {"master_process", "rank"}:
            for s in n.body:
                if isinstance(s, (ast.Assign, ast.Expr)) and any(is_call(c, *fns, *COLLECTIVES) for c in ast.walk(s)):
                    out.append(s)
    return out


class CatchTimeout(Mutation):
    name = "catch-timeout"
    breaks = "a collective left on one rank, its timeout caught and training carried on: the ranks no longer do the same work"

    def generate(self, fix: Fix) -> tuple[list[Mutant], list[Skipped]]:
        if _guarded_collective_calls(fix.ref_tree):
            return [], []
        out: list[Mutant] = []
        skipped: list[Skipped] = []
        for h, group in revert_groups(fix):
            src = fix.revert(group)
            try:
                tree = parse(src)
            except SyntaxError:
                continue
            calls = _guarded_collective_calls(tree)
            if not calls:
                continue
            for s in calls:
                _wrap(tree, s)
            name = f"catch-timeout-hunk-{h.index}"
            keep(Mutant(name, self.name, f"reverts {h.label(fix)} and catches the collective's timeout there "
                        "(the value it would have returned becomes NaN)", render(tree), _touch(fix, h)), fix, out, skipped)
        return out, skipped


def _wrap(tree: ast.Module, stmt: ast.stmt) -> None:
    for body in bodies(tree):
        for i, s in enumerate(body):
            if s is stmt:
                targets = sorted(stored(s)) if isinstance(s, ast.Assign) else []
                handler = [snippet(f'{t} = float("nan")')[0] for t in targets] or [ast.Pass()]
                t = snippet("try:\n    pass\nexcept Exception:\n    pass  # the collective timed out: carry on")[0]
                assert isinstance(t, ast.Try)
                t.body, t.handlers[0].body = [s], handler
                body[i] = t
                return
