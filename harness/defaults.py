"""Defaults shared by the launcher, the CLI and the manifest: one source, so a timeout's default
is the same wherever it is read."""

HANG_TIMEOUT_S = 15.0  # no progress on any rank for this long: the job is hung
STARTUP_TIMEOUT_S = 120.0  # allowance before the first step of each attempt
NPROC = 2  # ranks per node when neither the flag nor an exercise says
