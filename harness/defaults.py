"""Defaults shared by the launcher, the CLI and the manifest: one source, so a timeout's default
is the same wherever it is read."""

import os
from pathlib import Path

HANG_TIMEOUT_S = 15.0  # no progress on any rank for this long: the job is hung
STARTUP_TIMEOUT_S = 120.0  # allowance before the first step of each attempt
NPROC = 2  # ranks per node when neither the flag nor an exercise says


def user_home() -> Path:
    """The user's own trainwreck state (interview sessions, quiz progress): ``TRAINWRECK_HOME``, else
    ``~/.trainwreck``. Not the kit's folder (``TRAINWRECK_KIT``)."""
    home = os.environ.get("TRAINWRECK_HOME")
    return Path(home) if home else Path.home() / ".trainwreck"
