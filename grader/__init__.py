"""trainwreck's grader: checks over run dirs, fair throughput, scores, reports, and the CLI.
Depends on ``harness``; never the reverse."""
