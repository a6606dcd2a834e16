"""Follow-up banks say only what the kit really does (issue 26, item 4).

A question or answer that says what the grader, the harness or the kit does is listed in CLAIMS
with what proves it: the check, the case that grades it, the test that does. The tests assert the
bank still says it, that the proof still holds, and that no bank makes such a claim unlisted.
Two claims were untrue and are reworded: memory-leak's trimmed-history patch ("the grader passes
it": memory_flat fails it, variant partial-keep-last-8) and sampler-replay's "the grader says rank
1 consumed indices again after the restart" (on the shipped script sample_partition reports the
repeated epoch order first; the replay only once the order is fixed)."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

from grader.questions import load_all

REPO = Path(__file__).resolve().parents[2]
# Words that make a follow-up a statement about the kit rather than about production.
ABOUT_THE_KIT = re.compile(r"\b(grader|graded|grades|the kit|kit's|harness|checks pass)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Claim:
    says: str  # the claim's words in the bank
    proofs: tuple[tuple[str, str], ...]  # (file, text it holds): the check, case or test that proves it


CLAIMS = {
    ("collective-deadlock", "nccl-vs-gloo"): Claim(
        "times out at the process-group timeout the kit sets",
        (("harness/instrument.py", 'call.arguments["timeout"] = datetime.timedelta(seconds=pg_timeout_s)'),
         ("tests/harness/test_cli.py", "def test_pg_timeout_flag_is_applied_and_said"))),
    ("memory-leak", "trim-history-patch"): Claim(
        "the grader agrees: memory_flat fails it",
        (("tests/variants/memory-leak/partial-keep-last-8/variant.toml", 'must_fail = ["memory_flat"]'),
         ("tests/grader/checks/test_memory_flat.py", "# partial-keep-last-8"))),
    ("memory-leak", "not-build-memory"): Claim(
        "per-step memory already comes from the training loop or the harness",
        (("harness/instrument.py", '"rss_mb": self._rss.mb()'),
         ("tests/grader/checks/test_memory_flat.py", "rss"))),
    ("periodic-stall", "dcp-async"): Claim(
        "the kit's trace follows torch.save",
        (("harness/filewatch.py", "The save trace (``harness.saves``) follows the writes a rank makes through "
                                  "``torch.save``"),
         ("tests/harness/test_saves.py", "def test_a_real_run_is_traced_from_outside"))),
    ("sampler-replay", "ledger-evidence"): Claim(
        "sample_partition failed: the ledger showed a rank reading each epoch in the same order, or reading "
        "again after the restart samples it had trained on",
        (("grader/checks/sample_partition.py", "in the same order"),
         ("grader/checks/sample_partition.py", "samples were replayed"),
         ("tests/grader/checks/test_sample_partition.py", '"rank 0 consumed epochs 0 and 1 in the same order"'),
         ("tests/grader/checks/test_sample_partition.py", '"4 samples were replayed"'))),
}


def _text(f) -> str:
    return " ".join(" ".join((f.question, f.strong_answer, f.weak_answer)).split())


def test_every_claim_about_the_kit_is_listed_with_its_proof():
    made = {(slug, f.id) for slug, bank in load_all(REPO).items() for f in bank.followups
            if ABOUT_THE_KIT.search(_text(f))}
    assert made, "the pattern finds the claims"
    assert made <= set(CLAIMS), f"a follow-up says what the kit does with no proof listed: {sorted(made - set(CLAIMS))}"


def test_no_rubric_follow_up_claims_what_the_kit_does():
    """The rubrics' own follow-ups (asked of every exercise of a kind) make no such claim: each
    exercise's grader differs."""
    for path in sorted((REPO / "rubrics").glob("*.toml")):
        for k, f in enumerate(tomllib.loads(path.read_text(encoding="utf-8")).get("followups", [])):
            text = " ".join(f.get(x) or "" for x in ("question", "strong_answer", "weak_answer"))
            assert not ABOUT_THE_KIT.search(text), f"{path.name} followups[{k}] says what the kit does; prove it here"


@pytest.mark.parametrize("key", list(CLAIMS), ids=lambda k: "/".join(k))
def test_the_bank_says_it_and_the_proof_holds(key):
    slug, fid = key
    claim = CLAIMS[key]
    f = next(f for f in load_all(REPO)[slug].followups if f.id == fid)
    assert claim.says in _text(f), f"rubrics/followups/{slug}.toml {fid} no longer says {claim.says!r}"
    for path, text in claim.proofs:
        assert text in (REPO / path).read_text(encoding="utf-8"), f"{path} no longer holds {text!r}"


def test_gloo_dies_at_the_timeout_the_question_quotes():
    """'On gloo the job died after 10 seconds': the exercise's process-group timeout."""
    manifest = tomllib.loads((REPO / "exercises" / "collective-deadlock" / "exercise.toml").read_text())
    f = next(f for f in load_all(REPO)["collective-deadlock"].followups if f.id == "nccl-vs-gloo")
    assert f"died after {manifest['run']['pg_timeout']:g} seconds" in f.question


def test_the_trimmed_history_patch_is_a_case_that_must_fail_memory_flat():
    v = tomllib.loads((REPO / "tests/variants/memory-leak/partial-keep-last-8/variant.toml").read_text())
    assert v["expect"] == "fail" and v["must_fail"] == ["memory_flat"]
    f = next(f for f in load_all(REPO)["memory-leak"].followups if f.id == "trim-history-patch")
    assert "last 8 validation losses" in f.question and "the grader passes" not in _text(f)


@pytest.mark.slow
def test_the_grader_fails_the_trimmed_history_patch(tmp_path):
    """The case itself, graded as `trainwreck verify --variants memory-leak` grades it (20-90 s)."""
    from grader.variants import corpus_dir, grade_variant, load_variant

    v = load_variant(corpus_dir(REPO) / "memory-leak" / "partial-keep-last-8", "memory-leak")
    outcome = grade_variant(v, tmp_path, device="cpu")
    assert outcome.agrees, outcome.problem
    assert "memory_flat" in outcome.failed
