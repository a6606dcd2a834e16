"""One module per `trainwreck` command, each defining `command` (a click command)."""
