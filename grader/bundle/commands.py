"""The kit commands a brief or a hint prints, and what they become in the candidate bundle.

A brief is written for the kit: in a practice or session workspace `trainwreck run SLUG` runs the
workspace's copy and `trainwreck grade SLUG --workspace .` grades it. A bundle has no `trainwreck`:
its launcher and self-check are `python run.py` and `python selfcheck.py`, typed in the bundle's
top folder, so the brief it ships names those; a kit command with no bundle form is named as the
kit's, never as one to type there."""

from __future__ import annotations

import re
import shlex

FENCE = re.compile(r"```bash\n(.*?)\n```", re.S)
INLINE = re.compile(r"`(trainwreck(?: [^`]*)?|python [^`]*)`")
KIT_HEADING = "## Working with the kit"
BUNDLE_HEADING = "## Working with the bundle (in its top folder)"
SELF_CHECK_NOTE = "# what needs no reference run"


def commands(text: str) -> list[str]:
    """Every command ``text`` prints: each line of its ``bash`` blocks (less its comment), then each
    inline code span that starts with ``trainwreck`` or ``python``."""
    out = []
    for block in FENCE.findall(text):
        out += [c for line in block.splitlines() if (c := line.split("#", 1)[0].strip())]
    return out + [m.group(1) for m in INLINE.finditer(FENCE.sub("", text))]


def in_bundle(cmd: str, slug: str) -> str | None:
    """``cmd`` as typed in the bundle's top folder, or None where the bundle has no such command."""
    words = shlex.split(cmd)
    if words[:1] != ["trainwreck"]:
        return cmd
    sub, rest = (words[1], words[2:]) if len(words) > 1 else (None, [])
    if sub == "run":
        target, opts = (rest[0], rest[1:]) if rest and not rest[0].startswith("-") else (slug, rest)
        # a script path: the exercise's script, which the candidate edits in place in the bundle
        return shlex.join(["python", "run.py", slug if target.endswith(".py") else target, *opts])
    if sub == "grade":
        return f"python selfcheck.py {slug}"
    return None


def _block(body: str, slug: str) -> str:
    lines = []
    for line in body.splitlines():
        cmd, _, note = line.partition("#")
        if not cmd.strip():
            lines.append((line, ""))
            continue
        new = in_bundle(cmd.strip(), slug)
        if new is None:
            continue  # `trainwreck show`: the brief is this file
        if new.startswith("python selfcheck.py"):
            note = SELF_CHECK_NOTE[2:]
        lines.append((new, f"# {note.strip()}" if note.strip() else ""))
    width = max((len(c) for c, n in lines if n), default=0) + 3
    return "\n".join(c.ljust(width) + n if n else c for c, n in lines)


def _inline(m: re.Match, slug: str) -> str:
    new = in_bundle(m.group(1), slug)
    if new is None:
        return f"`{m.group(1)}` (in the kit; not in this bundle)"
    return f"`{new}`"


def for_bundle(text: str, slug: str) -> str:
    """The brief of ``slug`` as the bundle ships it: every command one the bundle has."""
    parts = []
    last = 0
    for m in FENCE.finditer(text):
        parts.append(INLINE.sub(lambda i: _inline(i, slug), text[last:m.start()]))
        parts.append(f"```bash\n{_block(m.group(1), slug)}\n```")
        last = m.end()
    parts.append(INLINE.sub(lambda i: _inline(i, slug), text[last:]))
    return "".join(parts).replace(KIT_HEADING, BUNDLE_HEADING)
