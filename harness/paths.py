"""Showing a ``file:line`` site to a person (the one path shortener of the kit's output): relative
to the current directory when the file is under it, else its last ``keep`` path components (all of
them when ``keep`` is None). ``relative=False`` skips the first rule, for messages stored in a
result that must not depend on where the grader was started."""

from __future__ import annotations

from pathlib import Path


def display_path(site: str | None, keep: int | None = None, relative: bool = True) -> str | None:
    if not site:
        return site
    if not Path(site).is_absolute():
        return site  # already relative (to where the run was launched)
    if relative:
        try:
            return str(Path(site).relative_to(Path.cwd()))
        except ValueError:
            pass
    return "/".join(Path(site).parts[-keep:]) if keep else site
