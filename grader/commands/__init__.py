"""One module per `trainwreck` command, each defining `command` (a click command). Commands are
thin: they parse, call the harness or the grader, and hand results to ``grader.console``."""
