"""torchrun's elastic agent, started with one command line for every run: ``python -m harness.agent``.

torchrun's options (``--max-restarts`` above all, which tells a kill-and-restart role from the main
run) would be readable by the candidate's ranks at ``/proc/<agent pid>/cmdline``. The launcher
writes them as a JSON list on this process's stdin instead; the agent reads them, puts
``/dev/null`` back on fd 0 for the ranks it starts (as the launcher's ``stdin=DEVNULL`` gave
before), and runs torchrun's own ``main`` with them, in this process: rendezvous, restarts and
signal handling stay torch's.

When the launch runs an artifact store, the agent also relays it to a TCP address on the ranks'
loopback (``harness.store_relay``) and exports that address before any rank starts.
"""

from __future__ import annotations

import json
import os
import sys

from harness import store_relay

ARGS_MAX = 1 << 20  # the options and the script's arguments, as JSON: far below this


def read_args(fd: int = 0) -> list[str]:
    chunks, size = [], 0
    while chunk := os.read(fd, 1 << 16):
        size += len(chunk)
        if size > ARGS_MAX:
            raise SystemExit(f"trainwreck agent: over {ARGS_MAX} bytes of options on stdin")
        chunks.append(chunk)
    args = json.loads(b"".join(chunks) or b"null")
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise SystemExit("trainwreck agent: stdin must hold torchrun's options as a JSON list of strings")
    return args


def main() -> None:
    args = read_args()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    store_relay.export()
    from torch.distributed.run import main as torchrun  # after the read: a bad start fails fast

    sys.argv = ["torchrun", *args]  # what torchrun's own messages and its error file name
    torchrun(args)


if __name__ == "__main__":
    main()
