"""Design scenarios: every manifest loads, the rubric has the agreed shape, the data files are
internally consistent (each total and derived column recomputed), and every worked figure quoted in
a brief, a constraints document, a rubric or the interviewer's notes is what the data gives."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from grader.errors import ManifestError
from grader.exercises import discover as discover_all
from grader.rubric import load_rubric
from grader.scenario import ANSWER_SECTIONS, answer_sections, load_scenario, manifest_kind
from tests.grader import scenario_figures as F

REPO = Path(__file__).resolve().parents[2]
SLUGS = ["llm-architecture", "gpu-allocation", "cost-efficiency", "cross-team-rollout"]


# ---- the rubric format agreed with interview sessions (format_version 2) --------------------------
# The sessions engineer owns the loader; this mirror only proves the shipped files have the shape.

@pytest.fixture(scope="module")
def scenarios():
    found, errors = discover_all(REPO)
    found = [e for e in found if e.kind == "scenario"]
    assert not errors, errors
    return {s.slug: s for s in found}


def test_the_four_scenarios_load(scenarios):
    assert sorted(scenarios) == sorted(SLUGS)


@pytest.mark.parametrize("slug", SLUGS)
def test_scenario_has_rubric_notes_and_every_file(scenarios, slug):
    s = scenarios[slug]
    m = s.manifest
    assert manifest_kind(s.dir) == "scenario" and m.symptom == m.summary
    rubric = load_rubric(s.rubric_path(REPO))  # the interview sessions' own loader
    assert rubric.id == m.rubric == slug and rubric.kind == "design"
    assert s.notes.is_file() and "Worked figures" in s.notes.read_text()
    brief = s.brief.read_text()
    assert f"**{m.minutes} minutes**" in brief and "feedback round" in brief  # the time budget, stated once
    assert f"{rubric.feedback.revision_minutes} minutes to revise" in " ".join(brief.split())
    assert any(f.startswith("data/") for f in m.files)


def test_script_exercises_are_not_scenarios():
    assert manifest_kind(REPO / "exercises" / "memory-leak") == "script"


# ---- the loader's errors --------------------------------------------------------------------------

MANIFEST = """
format_version = 1
kind = "scenario"
slug = "s"
title = "t"
summary = "one line"
difficulty = "hard"
minutes = 45
topics = ["x"]
rubric = "s"
deliverable = "d"
files = ["BRIEF.md", "CONSTRAINTS.md", "DIAGNOSIS.md", "data/a.csv"]
"""
RUBRIC = 'format_version = 2\nid = "s"\n'
ANSWER = "# Design: t\n\n" + "".join(f"## {s}\nprompt\n\n" for s in ANSWER_SECTIONS)


def make(tmp_path: Path, manifest: str = MANIFEST, rubric: str | None = RUBRIC, extra: tuple[str, ...] = (),
         answer: str = ANSWER) -> Path:
    d = tmp_path / "exercises" / "s"
    (d / "data").mkdir(parents=True)
    for f in ("BRIEF.md", "CONSTRAINTS.md", "data/a.csv", *extra):
        (d / f).write_text("x")
    (d / "DIAGNOSIS.md").write_text(answer)
    (d / "exercise.toml").write_text(manifest)
    if rubric is not None:
        (tmp_path / "rubrics").mkdir()
        (tmp_path / "rubrics" / "s.toml").write_text(rubric)
    return d


def test_a_good_manifest_loads(tmp_path):
    s = load_scenario(make(tmp_path), root=tmp_path)
    assert s.slug == "s" and s.rubric_path(tmp_path) == tmp_path / "rubrics" / "s.toml"


@pytest.mark.parametrize("edit, extra, rubric, message", [
    (lambda m: m.replace('kind = "scenario"', 'kind = "quiz"'), (), RUBRIC, "kind: Input should be 'scenario'"),
    (lambda m: m.replace("format_version = 1", "format_version = 3"), (), RUBRIC, "format_version: unsupported format_version 3; this trainwreck reads 1"),
    (lambda m: m.replace('slug = "s"', 'slug = "other"'), (), RUBRIC, "slug: 'other' differs from its folder"),
    (lambda m: m.replace("minutes = 45", "minutes = 0"), (), RUBRIC, "minutes: Input should be greater than 0"),
    (lambda m: m.replace('"data/a.csv"]', '"data/b.csv"]'), (), RUBRIC, "'data/b.csv' is not a file"),
    (lambda m: m.replace('"BRIEF.md", ', ""), (), RUBRIC, "must include BRIEF.md"),
    (lambda m: m.replace('"data/a.csv"]', '"../x.csv"]'), (), RUBRIC, "must be a path inside the scenario folder"),
    (lambda m: m, ("data/unlisted.csv",), RUBRIC, "'data/unlisted.csv' is in the folder but not listed"),
    (lambda m: m + "checks = []\n", (), RUBRIC, "checks: Extra inputs are not permitted; remove it"),
    (lambda m: m.replace('summary = "one line"', 'summary = """two\nlines"""'), (), RUBRIC, "must be one line"),
    (lambda m: m, (), None, "rubric: "),
    (lambda m: m, (), 'format_version = 1\nid = "s"\n', "format_version: 1 is not 2; a scenario's rubric is format 2"),
    (lambda m: m, (), 'format_version = 2\nid = "t"\n', "id: 't' is not 's'"),
    (lambda m: m.replace('"DIAGNOSIS.md", ', ""), (), RUBRIC, "must include DIAGNOSIS.md"),
    (lambda m: m, (), RUBRIC + '[[followups]]\nquestion = "q"\n',
     "followups: a scenario's questions belong in rubrics/followups/<slug>.toml alone"),
])
def test_malformed_scenarios_name_file_field_and_fix(tmp_path, edit, extra, rubric, message):
    d = make(tmp_path, edit(MANIFEST), rubric, extra)
    with pytest.raises(ManifestError, match=re.escape(message)) as e:
        load_scenario(d, root=tmp_path)
    assert "\n" not in str(e.value) and ";" in str(e.value)
    assert discover_all(tmp_path)[1], "discover reports the folder that does not load"


@pytest.mark.parametrize("answer, message", [
    (ANSWER.replace("## Cost\n", "## Budget\n"), "no section '## Cost'"),
    (ANSWER + "## Root cause\nx\n", "section '## Root cause' is not one of the design sections"),
    (ANSWER.replace("## Risks\nprompt\n\n", "") + "## Risks\n", "out of order or repeated"),
    ("# Diagnosis\n\n## Symptom\n## Root cause\n## The fix\n", "no section '## Requirements'"),
])
def test_an_answer_template_without_the_design_sections_is_refused(tmp_path, answer, message):
    d = make(tmp_path, answer=answer)
    with pytest.raises(ManifestError, match=re.escape(message)) as e:
        load_scenario(d, root=tmp_path)
    assert str(e.value).startswith(str(d / "DIAGNOSIS.md")) and "\n" not in str(e.value)


def test_answer_sections_skip_fenced_blocks():
    assert answer_sections("## A\n```\n## not a heading\n```\n## B\n### C\n") == ["A", "B"]


@pytest.mark.parametrize("slug", SLUGS)
def test_scenario_hands_the_design_template(scenarios, slug):
    text = (scenarios[slug].dir / "DIAGNOSIS.md").read_text()
    assert text.startswith(f"# Design: {scenarios[slug].manifest.title}\n")
    assert answer_sections(text) == list(ANSWER_SECTIONS)
    assert "Root cause" not in text and "Symptom" not in text


@pytest.mark.parametrize("how", ["practice", "session"])
def test_a_design_workspace_gets_the_design_template(tmp_path, monkeypatch, how):
    """Practice and interview workspaces copy the scenario's template, and write the debugging one
    only where an exercise has none."""
    from grader.practice import workspace as practice
    from grader.sessions.workspace import make_workspace

    monkeypatch.setenv("TRAINWRECK_HOME", str(tmp_path / "home"))
    if how == "practice":
        ws = practice.start("gpu-allocation", tmp_path / "ws")[0].root
    else:
        s = next(e for e in discover_all(REPO)[0] if e.slug == "gpu-allocation")
        ws = make_workspace(tmp_path / "ws", s.dir, s.manifest, "abc123", tmp_path / "sessions.db")
    text = (ws / "DIAGNOSIS.md").read_text()
    assert answer_sections(text) == list(ANSWER_SECTIONS) and "## Root cause" not in text


def test_unknown_kind_is_named(tmp_path):
    d = make(tmp_path, MANIFEST.replace('kind = "scenario"', 'kind = "movie"'))
    with pytest.raises(ManifestError, match="kind: 'movie' is unknown"):
        manifest_kind(d)


# ---- the data add up ------------------------------------------------------------------------------

def data(slug: str) -> Path:
    return REPO / "exercises" / slug / "data"


def test_llm_architecture_data_is_consistent():
    d = data("llm-architecture")
    model = F.toml(d / "model.toml")
    assert model["params"] == 12 * model["layers"] * model["hidden"] ** 2 + 2 * model["vocab"] * model["hidden"]
    assert model["ffn_hidden"] == 4 * model["hidden"] and model["hidden"] % model["heads"] == 0
    assert model["global_batch_tokens"] == model["global_batch_sequences"] * model["seq_len"]
    assert model["tokenised_corpus_TB"] == pytest.approx(model["corpus_tokens"] * 2 / 1e12)
    assert model["vocab"] < 2**16 and model["tokens"] <= model["corpus_tokens"]
    for r in F.rows(d / "options.csv"):
        assert float(r["price_per_accelerator_hour_usd"]) == pytest.approx(
            float(r["price_per_node_hour_usd"]) / int(r["accelerators_per_node"])), r["option"]
    peak = {r["accelerator"]: float(r["bf16_dense_tflops"]) for r in F.rows(d / "hardware.csv")}
    for r in F.rows(d / "benchmarks.csv"):
        if r["tokens_per_s_per_device"] and r["id"] != "llama2-7b":
            achieved = 6 * float(r["model_params"]) * float(r["tokens_per_s_per_device"]) / 1e12
            assert float(r["achieved_tflops_per_device"]) == pytest.approx(achieved, rel=1e-4), r["id"]
        assert float(r["mfu"]) == pytest.approx(float(r["achieved_tflops_per_device"]) / peak[r["accelerator"]],
                                                abs=5e-5), r["id"]
    llama = next(r for r in F.rows(d / "benchmarks.csv") if r["id"] == "llama2-7b")
    tps = 2.0e12 / (184320 * 3600)  # Touvron et al. 2023, Table 2
    assert float(llama["tokens_per_s_per_device"]) == round(tps)
    assert float(llama["achieved_tflops_per_device"]) == pytest.approx(6 * 7e9 * tps / 1e12, abs=0.005)
    rel = F.toml(d / "reliability.toml")["failures"]
    assert rel["per_gpu_mtbf_h"] == round(rel["days"] * 24 * rel["gpus"] / rel["unexpected_interruptions"])


def test_gpu_allocation_data_is_consistent():
    d = data("gpu-allocation")
    pool = F.rows(d / "pool.csv")
    count = {}
    for r in pool:
        count[r["allocated_to"]] = count.get(r["allocated_to"], 0) + int(r["count"])
    assert sum(int(r["count"]) for r in pool if r["accelerator"].startswith("A100")) == 20
    assert count == {"llm": 16, "vision": 4, "recsys": 32}
    weeks = F.rows(d / "utilisation_weekly.csv")
    for r in weeks:
        cap, busy = float(r["capacity_hours"]), float(r["busy_hours"])
        if r["team"] == "applied":
            assert cap == 8 * float(r["rented_node_hours"]), r  # p4d is rented by the 8-GPU node
        else:
            assert cap == count[r["team"]] * 168, r
        assert busy <= cap and busy <= float(r["requested_hours"]), r
    assert len(weeks) == 8 * 4 and len({r["week"] for r in weeks}) == 8
    llm = [r for r in weeks if r["team"] == "llm"]
    idle = sum(float(r["capacity_hours"]) - float(r["busy_hours"]) for r in llm)
    assert sum(float(r["gpu_hours"]) for r in F.rows(d / "llm_idle_breakdown.csv")) == idle
    c = F.toml(d / "costs.toml")
    o, t = c["owned"], c["tpu_commitment"]
    monthly = (2 * o["hgx_server_price_usd"] + o["pcie_server_price_usd"]) / o["depreciation_months"] + \
        o["power_kW"] * o["colocation_usd_per_kW_month"]
    assert o["monthly_cost_usd"] == pytest.approx(monthly, abs=0.005)
    assert o["cost_per_gpu_hour_usd"] == pytest.approx(monthly / (20 * F.HOURS_PER_MONTH), abs=5e-5)
    assert t["monthly_usd"] == pytest.approx(t["chips"] * t["usd_per_chip_hour"] * F.HOURS_PER_MONTH, abs=0.005)
    assert t["remaining_usd"] == pytest.approx(t["monthly_usd"] * t["months_remaining"], abs=0.005)


def test_cost_efficiency_data_is_consistent():
    d = data("cost-efficiency")
    p = F.toml(d / "prices.toml")
    od, sup = p["aws_on_demand"], p["aws_support"]
    bills = F.rows(d / "monthly_costs.csv")
    for r in bills:
        assert float(r["training_usd"]) == pytest.approx(int(r["training_p4d_node_hours"]) * od["p4d_24xlarge_usd_per_hour"], abs=0.005)
        assert float(r["inference_usd"]) == pytest.approx(int(r["inference_g5_instance_hours"]) * od["g5_xlarge_usd_per_hour"], abs=0.005)
        parts = ("training_usd", "inference_usd", "storage_usd", "shared_fs_usd", "egress_usd")
        assert float(r["subtotal_usd"]) == pytest.approx(sum(float(r[k]) for k in parts), abs=0.005)
        support = F.aws_business_support(float(r["subtotal_usd"]), sup["tiers_usd"], sup["rates"], sup["minimum_usd"])
        assert float(r["support_usd"]) == pytest.approx(support, abs=0.005)
        assert float(r["total_usd"]) == pytest.approx(float(r["subtotal_usd"]) + float(r["support_usd"]), abs=0.005)
    june = bills[-1]
    for k, r in enumerate(F.rows(d / "growth.csv"), 1):  # compounding from June: 8% training, 5% inference
        assert int(r["training_p4d_node_hours"]) == round(int(june["training_p4d_node_hours"]) * 1.08 ** k)
        assert int(r["inference_g5_instance_hours"]) == round(int(june["inference_g5_instance_hours"]) * 1.05 ** k)
    c = p["aws_commitments"]
    assert c["p5_usd_per_hour"] == pytest.approx(od["p5_48xlarge_usd_per_hour"] * (1 - c["p5_discount"]), abs=0.005)
    assert c["g5_usd_per_hour"] == pytest.approx(od["g5_xlarge_usd_per_hour"] * (1 - c["g5_discount"]), abs=5e-5)
    lost = p["aws_spot"]["p4d_node_hours_lost_to_interruption"]
    for r in F.rows(d / "benchmarks.csv"):
        useful = 1 - lost if r["option"].endswith("spot") else 1.0
        per_b = float(r["usd_per_node_hour"]) / (float(r["tokens_per_s_per_node"]) * 3600 * useful) * 1e9
        assert float(r["usd_per_billion_tokens"]) == pytest.approx(per_b, abs=0.005), r["option"]


def test_cross_team_rollout_data_is_consistent():
    d = data("cross-team-rollout")
    org = {t["id"]: t for t in F.toml(d / "org.toml")["teams"]}
    cap = F.rows(d / "capacity.csv")
    assert {r["team"] for r in cap} == set(org)
    for r in cap:
        assert int(r["engineers"]) == org[r["team"]]["engineers"], r["team"]
        assert float(r["engineer_weeks"]) == pytest.approx(
            int(r["engineers"]) * float(r["share_for_this_programme"]) * int(r["weeks"])), r["team"]
    tasks = F.rows(d / "workplan.csv")
    ids = {t["id"] for t in tasks}
    for t in tasks:
        assert t["owner"] in org and (not t["support_team"] or t["support_team"] in org), t["id"]
        assert set(t["depends_on"].split()) <= ids, t["id"]
    F.schedule(tasks)  # raises on a dependency cycle
    for r in F.rows(d / "risks.csv"):
        assert 1 <= int(r["likelihood"]) <= 5 and 1 <= int(r["impact"]) <= 5
        assert int(r["score"]) == int(r["likelihood"]) * int(r["impact"]), r["id"]
    incidents = sum(int(r["incidents_last_quarter"].split(":")[0]) for r in F.rows(d / "teams_stack.csv"))
    assert incidents == 6 and "six training incidents" in (REPO / "exercises/cross-team-rollout/BRIEF.md").read_text()


def test_schedule_and_critical_path_on_a_small_plan():
    plan = [{"id": "A", "duration_weeks": "2", "depends_on": ""},
            {"id": "B", "duration_weeks": "3", "depends_on": "A"},
            {"id": "C", "duration_weeks": "1", "depends_on": "A"},
            {"id": "D", "duration_weeks": "2", "depends_on": "B C"}]
    times = F.schedule(plan)
    assert times == {"A": (0, 2), "B": (2, 5), "C": (2, 3), "D": (5, 7)}
    assert F.critical_path(plan, times) == ["A", "B", "D"]
    with pytest.raises(ValueError, match="cycle"):
        F.schedule([{"id": "A", "duration_weeks": "1", "depends_on": "B"},
                    {"id": "B", "duration_weeks": "1", "depends_on": "A"}])


# ---- every quoted figure is the computed one ------------------------------------------------------

QUOTED = {  # figure name -> the documents (relative to the repo) that quote it
    "llm-architecture": (F.llm_architecture, {
        "solutions/llm-architecture/NOTES.md": [n for n in F.llm_architecture(REPO) if n != "save_share_30min"],
        "rubrics/llm-architecture.toml": ["chosen_cost", "onprem_days", "job_mtbf_h", "ckpt_write_s", "young_min"],
        "rubrics/followups/llm-architecture.toml": ["save_share_30min", "waste", "young_min"],
        "exercises/llm-architecture/BRIEF.md": ["budget", "deadline"],
        "exercises/llm-architecture/CONSTRAINTS.md": ["budget", "deadline"],
        "exercises/llm-architecture/exercise.toml": ["budget", "deadline"],
    }),
    "gpu-allocation": (F.gpu_allocation, {
        "solutions/gpu-allocation/NOTES.md": [n for n in F.gpu_allocation(REPO) if n not in ("weeks", "budget")],
        "exercises/gpu-allocation/BRIEF.md": ["budget", "tpu_months_left"],
        "exercises/gpu-allocation/CONSTRAINTS.md": ["budget", "tpu_months_left"],
        "rubrics/gpu-allocation.toml": ["llm_util", "vision_util", "tpu_util", "applied_util", "llm_idle_gpu_hours",
                                        "vision_unmet", "idle_covers_unmet"],
    }),
    "cost-efficiency": (F.cost_efficiency, {
        "solutions/cost-efficiency/NOTES.md": "*",
        "exercises/cost-efficiency/BRIEF.md": ["jan_total", "june_total"],
        "exercises/cost-efficiency/exercise.toml": ["jan_total", "june_total"],
        "rubrics/cost-efficiency.toml": ["status_quo_12", "nimbus_best_12", "big_job_p4d_h", "big_job_h100_h",
                                         "growth_12", "month12_h100_nodes"],
    }),
    "cross-team-rollout": (F.cross_team_rollout, {
        "solutions/cross-team-rollout/NOTES.md": "*",
        "rubrics/cross-team-rollout.toml": ["critical_path", "ti_peak_load", "ti_available_per_week",
                                            "t8_weeks_at_capacity", "ti_share_used"],
    }),
}


def _cases():
    for slug, (fn, docs) in QUOTED.items():
        figures = fn(REPO)
        for doc, names in docs.items():
            for name in (figures if names == "*" else names):
                yield pytest.param(doc, name, figures[name], id=f"{slug}:{Path(doc).name}:{name}")


@pytest.mark.parametrize("doc, name, text", list(_cases()))
def test_quoted_figure_is_the_computed_one(doc, name, text):
    body = " ".join((REPO / doc).read_text().split())  # a figure may wrap across lines
    # not part of a longer number: "7 engineers" must not match "17 engineers", "$1.04" not "$1.045"
    pattern = r"(?<![\d.,])" + re.escape(text) + r"(?![\d]|[.,]\d)"
    assert re.search(pattern, body), f"{doc} should quote {name} as {text!r}"
