"""Which side of the system each test file exercises, as a marker, so that a developer who touched
one side runs its tests alone: ``pytest -m "isolation and slow"`` runs the sandbox's launched
tests, ``pytest -m "launcher"`` everything about the launcher. The first rule whose prefix a test
file's path (relative to the repository) starts with decides; every test file must match one
(tests/test_areas.py)."""

from __future__ import annotations

H, G = "tests/harness/test_", "tests/grader/"

RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("hostile", ("tests/adversarial/",)),
    ("isolation", tuple(H + m for m in ("sandbox", "launch_sandboxed", "limits", "proctree", "procwatch", "audit",
                                        "bootstrap_settings"))
     + (G + "test_isolation", G + "test_grading_env", G + "commands/test_isolation_cli")),
    ("channel", (H + "channel", H + "rundir")),
    ("in_rank", tuple(H + m for m in ("instrument", "collectives", "native_trace", "saves", "rawwrites", "memstats",
                                      "finalparams", "threadstate", "filewatch", "workloads", "store_service",
                                      "evidence", "device", "injector"))),
    ("launcher", ("tests/harness/",)),
    ("validity", (G + "validity/", G + "test_variants", G + "test_record_verify")),
    ("interviews", (G + "sessions/", G + "report/", G + "bundle/", G + "test_attempts", G + "test_questions",
                    G + "test_rubric",
                    G + "test_scenario", G + "test_followup_claims", G + "commands/test_answers_closed",
                    G + "commands/test_session_show_width")),
    ("practice", (G + "commands/test_practice", G + "commands/test_watch_keys", G + "commands/test_brief_commands")),
    ("tools", (G + "tools/", G + "test_issues")),
    ("grading", (G,)),
    ("layout", ("tests/test_",)),
)

AREAS = tuple(area for area, _ in RULES)


def area_of(relpath: str) -> str | None:
    for area, prefixes in RULES:
        if relpath.startswith(prefixes):
            return area
    return None
