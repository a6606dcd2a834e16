"""Expected errors shared by modules that should not have to import each other (the CLI's `run` path
stays free of pydantic and of the grading modules, so launching a script starts fast)."""


class ManifestError(Exception):
    """One line: ``<file>: <field>: <problem>; <fix>``."""
