"""Single keys for `trainwreck watch` (h hint, l list, g grade now, q quit), as rustlings takes
them: the terminal in cbreak mode (each key arrives as typed, unechoed; Ctrl-C still interrupts),
read without blocking, and set back as it was on the way out, whatever ends the watch."""

from __future__ import annotations

import os
import select
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

KEYS = {"h": "hint", "l": "list", "g": "grade now", "q": "quit"}


def _foreground(fd: int) -> bool:
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:  # a terminal that is not this process's controlling one: nobody else's either
        return True


@contextmanager
def single_keys(stream=None) -> Iterator[Callable[[], str] | None]:
    """A function returning the keys typed since it was last called ('' for none); None where
    ``stream`` (stdin) is not a terminal: a watch run from a script or a pipe takes no keys."""
    stream = sys.stdin if stream is None else stream
    try:
        fd = stream.fileno()
        # a terminal this process is in the foreground of (a background watch would be stopped,
        # SIGTTOU, for setting it)
        tty_ = os.isatty(fd) and _foreground(fd)
    except (AttributeError, OSError, ValueError):
        tty_ = False
    if not tty_:
        yield None
        return
    import termios
    import tty

    before = termios.tcgetattr(fd)
    tty.setcbreak(fd)

    def typed() -> str:
        got = b""
        while select.select([fd], [], [], 0)[0]:
            chunk = os.read(fd, 64)
            if not chunk:
                break
            got += chunk
        return got.decode(errors="replace").lower()

    try:
        yield typed
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, before)
