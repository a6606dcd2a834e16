"""``docs/cli.md``, generated from the real ``--help`` of every command (``make docs``), and checked
in CI against a fresh generation (``make docs-check``), so the reference cannot drift from the
code."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from grader.cli import cli

HEADER = """# trainwreck command reference

Generated from the commands' own `--help` by `make docs`; CI fails when this file differs from a
fresh generation (`make docs-check`). Edit the commands' help text, not this file.
"""


def _help(command: click.Command, path: list[str], parent: click.Context | None) -> list[str]:
    extra = {"terminal_width": 100, "max_content_width": 100}
    ctx = command.make_context(path[-1], [], parent=parent, resilient_parsing=True, **extra)
    out = [f"## `{' '.join(path)}`", "", "```text", command.get_help(ctx).rstrip(), "```", ""]
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                out += _help(sub, [*path, name], ctx)
    return out


def render() -> str:
    return HEADER + "\n" + "\n".join(_help(cli, ["trainwreck"], None))


def main(argv: list[str]) -> int:
    target = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent / "docs" / "cli.md"
    text = render()
    if argv[:1] == ["--check"]:
        current = target.read_text() if target.exists() else ""
        if current != text:
            print(f"{target} is out of date with the commands' --help; run `make docs` and commit it",
                  file=sys.stderr)
            return 1
        return 0
    target.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
