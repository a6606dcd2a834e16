"""Defaults shared by the launcher, the CLI and the manifest: one source, so a timeout's default
is the same wherever it is read."""

import os
from pathlib import Path

HANG_TIMEOUT_S = 15.0  # a deadlock (every rank waiting in a collective) held this long: the job is hung
STARTUP_TIMEOUT_S = 120.0  # the same allowance before the first step of each attempt
# Any stall (a straggler outside every collective, no progress at all) is ended only past the process
# group's own timeout, plus this margin so that torch's error is the one the user sees: torch's
# default where no rank has reported its own yet (gloo's; NCCL's watchdog is 10 min).
PG_TIMEOUT_S = 1800.0
STALL_MARGIN_S = 30.0
NPROC = 2  # ranks per node when neither the flag nor an exercise says


def user_home() -> Path:
    """The user's own trainwreck state (interview sessions, quiz progress): ``TRAINWRECK_HOME``, else
    ``~/.trainwreck``. Not the kit's folder (``TRAINWRECK_KIT``)."""
    home = os.environ.get("TRAINWRECK_HOME")
    return Path(home) if home else Path.home() / ".trainwreck"
