"""``trainwreck verify [SLUG...]``: the kit's self-check (rustlings' `dev check`): every broken
script fails the checks its manifest names, every reference solution passes."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path

import click

from grader import console
from grader.commands._options import device_option
from grader.errors import EXIT_FAIL, EXIT_OK, UserError
from harness.executor import Executor, Sandboxed, executor_for


@click.command("verify")
@click.argument("slugs", nargs=-1)
@device_option
@click.option("--out", type=click.Path(path_type=Path), default=None,
              help="Where the gradings go (default .trainwreck/verify/<time>).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
@click.option("--variants", is_flag=True,
              help="Grade the variant corpus (tests/variants/<slug>/<name>) instead: every valid fix in another "
                   "style must pass, every partial fix and cheat must fail as its variant.toml says.")
@click.option("--validity", is_flag=True,
              help="Grade the generated validity suite instead (grader/validity, tests/validity/<slug>.toml): every "
                   "semantics-preserving rewrite of the reference fix must pass, every property-breaking mutation "
                   "must fail with the check and message its config names. Writes <out>/validity.json.")
@click.option("--ci", "ci_only", is_flag=True,
              help="With --variants or --validity: only CI's tier (cases marked ci = true, a few per exercise); "
                   "the whole corpus or suite takes hours on a 2-core machine.")
@click.option("--case", "cases", multiple=True, metavar="NAME",
              help="With --validity: only the cases of this name (a rewrite, a mutation, or all-rewrites; "
                   "repeatable), as --list names them.")
@click.option("--list", "list_only", is_flag=True,
              help="With --validity: print the generated cases, and those left out with why, without grading.")
@click.option("--no-sandbox", "no_sandbox", is_flag=True,
              help="Run the graded code without the bubblewrap sandbox (unisolated: only where the sandbox cannot run; "
                   "result.json and every report say so).")
def command(slugs, device, out, as_json, variants, validity, ci_only, cases, list_only, no_sandbox):
    """Prove every exercise (or SLUGS) fails as shipped and passes with its reference solution."""
    if ci_only and not (variants or validity):
        raise UserError("--ci selects CI's tier of the variant corpus or the validity suite; give it with "
                        "--variants or --validity")
    if list_only and not validity:
        raise UserError("--list prints the validity suite's generated cases; give it with --validity")
    if cases and not validity:
        raise UserError("--case picks cases of the validity suite; give it with --validity")
    if variants and validity:
        raise UserError("--variants and --validity are two suites; grade one at a time")
    executor = executor_for(sandboxed=not no_sandbox)
    if validity:
        _validity(list(slugs), device, out, as_json, executor, ci_only, list_only, list(cases))
    if variants:
        _variants(list(slugs), device, out, as_json, executor, ci_only)
    from grader.exercises import discover
    from grader.exercises import find_script as find
    from grader.verify import Verification, verify

    found, errors = discover()
    scripts = [e for e in found if e.kind == "script"]  # a design scenario has nothing to verify
    if slugs:
        scripts, errors = [find(s) for s in slugs], []
    if not scripts and not errors:
        raise UserError("no exercises found")
    out = (out or Path(".trainwreck") / "verify" / datetime.now().strftime("%Y%m%d-%H%M%S")).resolve()
    report = [Verification.unloadable(e) for e in errors]
    for ex in scripts:
        v = verify(ex, out / ex.slug, device=device, progress=console.info, executor=executor)
        report.append(v)
        if not as_json:
            console.verify_line(v)
    if as_json:
        console.emit_json({"exercises": [v.to_json() for v in report]})
    sys.exit(EXIT_OK if all(v.ok for v in report) else EXIT_FAIL)


def _variants(slugs: list[str], device: str, out: Path | None, as_json: bool,
              executor: Executor = Sandboxed(), ci_only: bool = False) -> None:
    import time

    from grader.variants import discover as discover_variants
    from grader.variants import grade_variant

    corpus = discover_variants(slugs or None, ci_only=ci_only)
    if not corpus:
        raise UserError("no variants found under tests/variants" + (f" for {', '.join(slugs)}" if slugs else ""))
    out = (out or Path(".trainwreck") / "variants" / datetime.now().strftime("%Y%m%d-%H%M%S")).resolve()
    outcomes = []
    for v in corpus:
        console.info(f"variant {v.id} ({v.spec.kind}, expected to {v.spec.expect})")
        started = time.monotonic()
        o = grade_variant(v, out / v.slug / v.name, device=device, progress=console.info, executor=executor)
        o.wall_s = round(time.monotonic() - started, 1)
        outcomes.append(o)
        if not as_json:
            console.variant_line(o)
    if as_json:
        console.emit_json({"variants": [o.to_json() for o in outcomes], "agreement": _agreement(outcomes)})
    else:
        console.variant_summary(_agreement(outcomes))
    sys.exit(EXIT_OK if all(o.agrees for o in outcomes) else EXIT_FAIL)


def _validity(slugs: list[str], device: str, out: Path | None, as_json: bool, executor: Executor, ci_only: bool,
              list_only: bool, names: list[str] | None = None) -> None:
    from grader.validity.run import grade_case, run_result, summary, write_result
    from grader.validity.suite import build, script_slugs

    started = datetime.now().astimezone()
    # listing shows a config's unwritten mutants (the cases to write it for); grading refuses them
    suites = [build(s, ci_only=ci_only, draft=list_only) for s in (slugs or script_slugs())]
    if names:
        unknown = [n for n in names if not any(c.name == n for s in suites for c in s.cases)]
        if unknown:
            raise UserError(f"--case {unknown[0]}: no such case in {', '.join(s.slug for s in suites)}"
                            f"{' (CI tier)' if ci_only else ''}; `trainwreck verify --validity SLUG --list` "
                            "names them")
        for s in suites:
            s.cases = [c for c in s.cases if c.name in names]
    if list_only:
        if as_json:
            console.emit_json({"exercises": [console.validity_suite_json(s) for s in suites]})
        else:
            for s in suites:
                console.validity_list(s)
        sys.exit(EXIT_OK)
    out = (out or Path(".trainwreck") / "validity" / started.strftime("%Y%m%d-%H%M%S")).resolve()
    outcomes = []
    for suite in suites:
        for case in suite.cases:
            console.info(f"{case.id} (expected to {case.spec.expect})")
            o = grade_case(case, out, device=device, executor=executor, progress=console.info)
            outcomes.append(o)
            if not as_json:
                console.validity_line(o)
            # the run result after every case: an interrupted run keeps what it graded
            write_result(run_result(outcomes, started, "trainwreck verify --validity " + " ".join(
                [*slugs, *(["--ci"] if ci_only else []), *(f"--case {n}" for n in names or [])])), out)
    if as_json:
        console.emit_json({"cases": [o.to_json() for o in outcomes], "summary": summary(outcomes),
                           "result": str(out / "validity.json")})
    else:
        console.validity_summary(summary(outcomes), out / "validity.json")
    sys.exit(EXIT_OK if all(o.agrees for o in outcomes) else EXIT_FAIL)


def _agreement(outcomes) -> dict:
    per: dict[str, dict[str, int]] = {}
    for o in outcomes:
        row = per.setdefault(o.variant.slug, {"variants": 0, "agree": 0, "false_pass": 0, "false_fail": 0})
        row["variants"] += 1
        row["agree"] += o.agrees
        if not o.agrees:
            row["false_pass" if o.variant.spec.expect == "fail" else "false_fail"] += 1
    return per
