"""A design scenario's follow-up questions: listed once, and every figure they quote the one the
scenario's data gives (issue 26, item 4).

They were listed twice because each design rubric carried its own ``[[followups]]`` written before
the per-scenario banks (``rubrics/followups/<slug>.toml``), and the interviewer's view merges the
rubric's questions with the bank's; the rubrics' copies are gone and the scenario loader refuses
them back (``grader.scenario``)."""

from __future__ import annotations

import difflib
import itertools
import re
import tomllib
from pathlib import Path

import pytest

from grader.exercises import discover
from grader.rubric import exercise_followups, for_exercise
from tests.grader import scenario_figures as F

REPO = Path(__file__).resolve().parents[2]
SLUGS = ["llm-architecture", "gpu-allocation", "cost-efficiency", "cross-team-rollout"]
FIGURES = {"llm-architecture": F.llm_architecture, "gpu-allocation": F.gpu_allocation,
           "cost-efficiency": F.cost_efficiency, "cross-team-rollout": F.cross_team_rollout}


def _shown(slug: str):
    """What the interviewer's view lists for the exercise: its rubric's questions and its bank's."""
    ex = next(e for e in discover(REPO)[0] if e.slug == slug)
    rubric = for_exercise(ex.manifest, ex.dir / "exercise.toml", REPO)
    return [*rubric.followups, *exercise_followups(slug, REPO)]


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


def near_duplicates(questions: list[str]) -> list[tuple[str, str]]:
    """Pairs that ask the same thing reworded. Measured on the kit's 14 exercises: the 10 copies
    the design rubrics and banks held scored 0.60 to 1.0 alike by characters (difflib); distinct
    questions of one exercise at most 0.52 by characters and 0.30 by shared words."""
    out = []
    for a, b in itertools.combinations(questions, 2):
        wa, wb = _words(a), _words(b)
        if difflib.SequenceMatcher(None, a.lower(), b.lower()).ratio() >= 0.58 or len(wa & wb) / len(wa | wb) >= 0.4:
            out.append((a, b))
    return out


def test_near_duplicates_catches_a_reworded_copy():
    assert near_duplicates(["How do you know the llm run's resume is correct before week 14?",
                            "How do you know the llm run's resume works before week 14, without 64 H100s?"])
    assert not near_duplicates(["What would you deliberately not build?",
                                "How do you know a resumed run is the same run?"])


@pytest.mark.parametrize("slug", [e.slug for e in discover(REPO)[0]])
def test_every_exercise_lists_each_followup_once(slug):
    questions = [f.question for f in _shown(slug)]
    assert questions, f"{slug} shows no follow-up"
    assert not near_duplicates(questions), f"{slug} asks the same thing twice"


# ---- every number a scenario's follow-up quotes ----------------------------------------------------
# The figures each bank quotes, computed from the scenario's data (scenario_figures), and figures
# derived from them here: each must appear in the bank as computed.
def _extra(slug: str, figs: dict[str, str]) -> dict[str, str]:
    data = REPO / "exercises" / slug / "data"
    if slug == "llm-architecture":  # one node of the plan lost, no spare to replace it
        return {"nodes_left": f"{int(figs['chosen_nodes'].split()[0]) - 1} nodes"}
    if slug == "cost-efficiency":
        prices = tomllib.loads((data / "prices.toml").read_text(encoding="utf-8"))
        return {"spot_lost": f"{prices['aws_spot']['p4d_node_hours_lost_to_interruption']:.0%} of hours"}
    return {}


QUOTED = {
    "llm-architecture": ["chosen_gpus", "chosen_nodes", "nodes_left", "mfu_h100", "zero3_per_gpu_GB", "ckpt_write_s",
                         "save_share_30min", "waste", "young_min", "chosen_days"],
    "cost-efficiency": ["big_job_h100_h", "spot_lost"],
    "gpu-allocation": [],
    "cross-team-rollout": [],
}
# Numbers a question imagines rather than quotes (a measurement on a day to come); nothing in the
# data to match.
HYPOTHETICAL = {
    ("llm-architecture", "mfu-drop"): {"33"},  # the validation week's measured MFU
    ("gpu-allocation", "buy-when"): {"90", "10"},  # the pool's use and vision's wait six weeks on
}
NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")


def _numbers(text: str) -> set[str]:
    return {n.replace(",", "") for n in NUMBER.findall(text)}


def _bank(slug: str) -> list[dict]:
    return tomllib.loads((REPO / "rubrics" / "followups" / f"{slug}.toml").read_text(encoding="utf-8"))["followups"]


def _text(f: dict) -> str:
    return " ".join(" ".join(f[k] for k in ("question", "strong_answer", "weak_answer")).split())


def _quotes(text: str, figure: str) -> bool:
    # not part of a longer number: "7 engineers" must not match "17 engineers"
    return re.search(r"(?<![\d.,])" + re.escape(figure) + r"(?![\d]|[.,]\d)", text) is not None


@pytest.mark.parametrize("slug", SLUGS)
def test_bank_quotes_each_figure_as_the_data_gives_it(slug):
    figs = FIGURES[slug](REPO)
    figs.update(_extra(slug, figs))
    body = " ".join(_text(f) for f in _bank(slug))
    for name in QUOTED[slug]:
        assert _quotes(body, figs[name]), f"rubrics/followups/{slug}.toml should quote {name} as {figs[name]!r}"


@pytest.mark.parametrize("slug", SLUGS)
def test_every_number_in_a_followup_is_from_the_scenario(slug):
    """A number is a computed figure quoted above, a figure the candidate is handed (the brief, the
    constraints, the data files), or one the question imagines; anything else is a figure no one
    can check against the scenario."""
    figs = FIGURES[slug](REPO)
    figs.update(_extra(slug, figs))
    folder = REPO / "exercises" / slug
    handed = set().union(*(_numbers(p.read_text(encoding="utf-8")) for p in folder.rglob("*")
                           if p.is_file() and p.suffix in (".md", ".csv", ".toml")))
    for f in _bank(slug):
        text = _text(f)
        computed = set().union(*(_numbers(figs[n]) for n in QUOTED[slug] if _quotes(text, figs[n])))
        stray = _numbers(text) - computed - handed - HYPOTHETICAL.get((slug, f["id"]), set())
        assert not stray, f"rubrics/followups/{slug}.toml {f['id']}: {sorted(stray)} not in the scenario's data"


def test_a_changed_figure_is_caught():
    figs = F.llm_architecture(REPO)
    assert _quotes("Each save blocks about 84 s", figs["ckpt_write_s"])
    assert not _quotes("Each save blocks about 184 s", figs["ckpt_write_s"])
    assert _numbers("a 47.0-day run on 1,056 sequences") == {"47.0", "1056"}
