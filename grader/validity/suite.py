"""The generated cases of one exercise and how each is judged.

A case is the reference fix rewritten (must pass) or mutated (must fail with a reason naming the
property: the check its config names, and text the check's message holds). Every case becomes a
``grader.variants.Variant`` with that expected verdict, so it is graded and judged exactly as the
hand-written corpus is (``grader.variants.judge``: the same agreement rule)."""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property, partial
from pathlib import Path
from typing import Literal

from grader.errors import ManifestError
from grader.files import read_quietly
from grader.validity.config import FORMAT_VERSION as CONFIG_VERSION
from grader.validity.config import MIN_MUTATIONS, MIN_REWRITES, ValidityConfig, config_path, load_config
from grader.validity.mutations import BY_NAME as MUTATION_FAMILIES
from grader.validity.mutations import Fix, Skipped, generate
from grader.validity.mutations.base import Mutant
from grader.validity.rewrites import BY_NAME as REWRITES_BY_NAME
from grader.validity.rewrites import REWRITES, compose
from grader.validity.rewrites.base import Rewrite
from grader.validity.source import parse, render
from grader.variants import FORMAT_VERSION, Variant, VariantSpec

ALL = "all-rewrites"  # every rewrite that applies, composed into one script


@dataclass
class Case:
    slug: str
    name: str
    kind: Literal["rewrite", "mutation"]
    detail: str  # a rewrite: why it preserves semantics; a mutation: what exactly changed
    make: Callable[[], str]  # the case's script (made when first needed: listing makes none)
    spec: VariantSpec
    breaks: str = ""  # a mutation: the property its family breaks

    @cached_property
    def source(self) -> str:
        return self.make()

    @property
    def id(self) -> str:
        return f"{self.slug}/{self.kind}/{self.name}"

    def variant(self, folder: Path) -> Variant:
        """The case as a corpus variant: its script written to ``folder``, its expected verdict."""
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "train.py").write_text(self.source)
        return Variant(self.slug, f"{self.kind}-{self.name}", folder, self.spec)


@dataclass
class Suite:
    slug: str
    config: ValidityConfig
    cases: list[Case] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)  # rewrites and mutants not graded, and why
    # a draft's generated mutants that have no expected verdict yet (``--list`` while writing the config)
    unwritten: list[Mutant] = field(default_factory=list)
    ci_only: bool = False  # the cases are CI's tier only: the minimum counts are the whole suite's

    @property
    def rewrites(self) -> list[Case]:
        return [c for c in self.cases if c.kind == "rewrite" and c.name != ALL]

    @property
    def mutations(self) -> list[Case]:
        return [c for c in self.cases if c.kind == "mutation"]

    def short(self) -> list[str]:
        """Counts under the minimum that the config does not explain."""
        out: list[str] = []
        if self.ci_only:
            return out
        if len(self.rewrites) < MIN_REWRITES and not self.config.fewer_rewrites:
            out.append(f"{len(self.rewrites)} rewrites apply (at least {MIN_REWRITES}); say why in fewer_rewrites")
        if len(self.mutations) < MIN_MUTATIONS and not self.config.fewer_mutations:
            out.append(f"{len(self.mutations)} mutations apply (at least {MIN_MUTATIONS}); say why in fewer_mutations")
        return out


def script_source(slug: str, root: Path | None, kind: str) -> str:
    """The exercise's entry script as shipped (``broken``) or as fixed (``solution``)."""
    from grader.exercises import find_script

    ex = find_script(slug, root)
    return read_quietly((ex.solution_dir if kind == "solution" else ex.dir) / ex.manifest.entry).decode()


def _rewritten(r: Rewrite, tree: ast.Module) -> str:
    """A rewrite's script, made when the case is first graded (listing the suite makes none)."""
    return render(r.apply(tree))


def _mutated(m: Mutant) -> str:
    return m.source


def build(slug: str, root: Path | None = None, ci_only: bool = False, draft: bool = False) -> Suite:
    """The cases of ``slug``: every rewrite that applies (and is not skipped by the config), all of
    them composed, and every generated mutant with the verdict its config writes down. A ``draft``
    (listing only) takes a missing config as empty and keeps the mutants it has no verdict for in
    ``unwritten``, so that the cases can be seen before the config is written."""
    from grader.checks import CHECK_NAMES
    from grader.exercises import find_script

    path = config_path(slug, root)
    cfg = ValidityConfig(format_version=CONFIG_VERSION) if draft and not path.exists() else load_config(slug, root)
    checks = {c.name for c in find_script(slug, root).manifest.checks}
    ref = script_source(slug, root, "solution")
    tree = parse(ref)
    suite = Suite(slug, cfg)
    for name in cfg.skip_rewrites:
        if name not in REWRITES_BY_NAME:
            raise ManifestError(f"{path}: skip_rewrites.{name}: no rewrite of that name; the library has "
                                f"{', '.join(REWRITES_BY_NAME)}")
        if not REWRITES_BY_NAME[name].applies(tree):
            raise ManifestError(f"{path}: skip_rewrites.{name}: the rewrite does not apply to the reference anyway; "
                                "remove the line")
    for n in cfg.ci_rewrites:
        if n != ALL and n not in REWRITES_BY_NAME:
            raise ManifestError(f"{path}: ci_rewrites: {n!r} is no rewrite; name one of the library's or {ALL!r}")
    mutants, skipped = generate(Fix(script_source(slug, root, "broken"), ref))
    names = {m.name for m in mutants}
    for name in cfg.mutations:
        if name not in names:
            raise ManifestError(f"{path}: mutations.{name}: no such mutant is generated from the fix "
                                f"(generated: {', '.join(sorted(names)) or 'none'}); remove the table or rename it")
    missing = [m for m in mutants if m.name not in cfg.mutations]
    if missing and draft:
        suite.unwritten, mutants = missing, [m for m in mutants if m.name in cfg.mutations]
    elif missing:
        m = missing[0]
        raise ManifestError(f"{path}: mutations.{m.name}: no expected verdict for this generated mutant ({m.detail}); "
                            f"add [mutations.{m.name}] with touches, must_fail, says and why, or skip = true"
                            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    used = []
    for r in REWRITES:
        if r.name in cfg.skip_rewrites:
            suite.skipped.append(Skipped(f"rewrite {r.name}", cfg.skip_rewrites[r.name]))
        elif r.applies(tree):
            used.append(r.name)
            suite.cases.append(Case(slug, r.name, "rewrite", r.why, partial(_rewritten, r, tree),
                                    _valid(r.why, r.name in cfg.ci_rewrites)))
    suite.cases.append(Case(slug, ALL, "rewrite", f"every rewrite that applies, composed: {', '.join(used)}",
                            lambda: render(compose(tree, used)[0]),
                            _valid("every rewrite above at once, each semantics-preserving", ALL in cfg.ci_rewrites)))
    suite.skipped += skipped
    for m in mutants:
        exp = cfg.mutations[m.name]
        if exp.touches is not None and exp.touches != m.touches:
            raise ManifestError(f"{path}: mutations.{m.name}.touches: the mutant now touches {m.touches!r}, not "
                                f"{exp.touches!r}: the fix changed; write this mutant's verdict again")
        bad = [c for c in exp.must_fail if c not in CHECK_NAMES or c not in checks]
        if bad:
            raise ManifestError(f"{path}: mutations.{m.name}.must_fail: {bad[0]!r} is not a check of {slug}'s manifest "
                                f"({', '.join(sorted(checks))})")
        if exp.skip:
            suite.skipped.append(Skipped(m.name, exp.why))
            continue
        family = MUTATION_FAMILIES[m.family]
        spec = VariantSpec(format_version=FORMAT_VERSION, kind="partial", expect="fail", why=exp.why,
                           must_fail=exp.must_fail, says=exp.says, ci=exp.ci,
                           throughput=exp.throughput or ("quick" if "throughput" in exp.must_fail else "skip"))
        suite.cases.append(Case(slug, m.name, "mutation", m.detail, partial(_mutated, m), spec, family.breaks))
    if ci_only:
        suite.cases, suite.ci_only = [c for c in suite.cases if c.spec.ci], True
    return suite


def _valid(why: str, ci: bool) -> VariantSpec:
    return VariantSpec(format_version=FORMAT_VERSION, kind="valid", expect="pass", why=why, throughput="quick", ci=ci)


def script_slugs(root: Path | None = None) -> list[str]:
    from grader.exercises import discover

    found, _ = discover(root)
    return sorted(e.slug for e in found if e.kind == "script")
