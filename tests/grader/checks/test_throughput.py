"""throughput: interleaved rounds and their figures, the compute bound's fractions from hand-built
rounds, the spec's ``bound``, that the bound is a protected kit file, and that a grading's result
carries the fractions (launches replaced by hand-built run dirs)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from grader.evidence import load_run
from grader.exercises import find, kit_root
from grader.grade import GradeOptions, grade
from grader.manifest import ManifestError, load_manifest
from grader.result import GradeResult
from grader.submission import assemble
from grader.throughput import measure, summarize
from tests.grader.builders import make_run

SLUG = "slow-input-pipeline"


class _Ev:
    def __init__(self, rate: float, status: str = "ok"):
        self.status = status
        self.ranks = {0: type("O", (), {"steps_per_s": rate})(), 1: type("O", (), {"steps_per_s": rate})()}


def _runner(rates: dict[str, list[float]], status: dict[str, list[str]] | None = None):
    order: list[tuple[str, str]] = []

    def run(role, tag):
        n = len([o for o in order if o[0] == role])
        order.append((role, tag))
        st = (status or {}).get(role, ["ok"] * 10)[n]
        return _Ev(rates[role][n], st)

    return run, order


@pytest.mark.parametrize("bound, cand, ref, status, want_cand, want_ref", [
    # per round: the bound's steps/s, the candidate's and the reference's (broken is 10 throughout)
    ([40, 40, 40], [20, 20, 20], [30, 30, 30], None, 0.5, 0.75),
    ([40, 50, 20], [20, 20, 20], [20, 25, 20], None, 0.5, 0.5),  # medians of per-round ratios
    ([40, 40, 40], [60, 60, 60], [30, 30, 30], None, 1.5, 0.75),  # above the bound: reported as is
    ([0, 40, 40], [20, 20, 30], [30, 30, 30], None, 0.625, 0.75),  # a bound with no steps: round skipped
    ([0, 0, 0], [20, 20, 20], [30, 30, 30], None, None, None),  # no bound rate at all: no figure
    ([40, 40, 40], [20, 20, 20], [30, 30, 30], ["failed", "ok", "ok"], 0.5, 0.75),  # failed bound skipped
    ([40, 40, 40], [20, 20, 20], [30, 30, 30], ["failed"] * 3, None, None),
    ([40, 40, 40], [0, 0, 0], [30, 30, 30], None, 0.0, 0.75),  # a candidate with no steps: 0, not "no bound"
])
def test_fraction_of_the_bound_is_the_median_of_per_round_ratios(bound, cand, ref, status, want_cand, want_ref):
    rates = {"broken": [10] * 4, "candidate": [5] + cand, "reference": [5] + ref, "bound": bound}
    run, order = _runner(rates, {"bound": status} if status else None)
    tp = summarize(measure(run, rounds=3, warmup_rounds=1, bound=True), suspicious_factor=2.0, pass_speedup=2.0,
                   bound=True)
    assert tp.fraction_of_bound == (pytest.approx(want_cand) if want_cand is not None else None)
    assert tp.reference_fraction_of_bound == (pytest.approx(want_ref) if want_ref is not None else None)
    if want_cand is None:
        assert "compute bound made no steps" in tp.note and tp.bound_spread is None
    else:
        assert "compute bound" not in tp.note
    # the bound runs in every measured round, after the three others, never in the warm-up
    assert [r for r, t in order if t == "warmup0"] == ["broken", "candidate", "reference"]
    assert [r for r, t in order if t == "round1"] == ["broken", "candidate", "reference", "bound"]


def test_without_a_bound_nothing_changes():
    rates = {"broken": [10] * 4, "candidate": [20] * 4, "reference": [30] * 4}
    run, order = _runner(rates)
    tp = summarize(measure(run, rounds=3, warmup_rounds=1), suspicious_factor=2.0, pass_speedup=2.0)
    assert "bound" not in {r for r, _ in order}
    assert tp.fraction_of_bound is None and tp.reference_fraction_of_bound is None
    assert tp.speedup == pytest.approx(2.0) and tp.reference_speedup == pytest.approx(3.0)


def _exercise_copy(tmp_path: Path) -> Path:
    d = tmp_path / SLUG
    d.mkdir()
    for f in ("exercise.toml", "train.py", "bound.py"):
        shutil.copy2(kit_root() / "exercises" / SLUG / f, d / f)
    return d


@pytest.mark.parametrize("line, says", [
    ('bound = "bound.py"', None),
    ("", None),
    ('bound = "/tmp/bound.py"', "must be a .py file inside the exercise folder"),
    ('bound = "../comm-bound/bound.py"', "must be a .py file inside the exercise folder"),
    ('bound = "bound.sh"', "must be a .py file inside the exercise folder"),
    ('bound = 3', "bound: Input should be a valid string"),
    ('bound = "train.py"', "bound: 'train.py' is editable; the bound must be a kit-owned file"),
    ('bound = "missing.py"', "bound: 'missing.py' is not a file"),
])
def test_manifest_bound(tmp_path, line, says):
    d = _exercise_copy(tmp_path)
    text = (d / "exercise.toml").read_text()
    assert 'bound = "bound.py"' in text, "the shipped manifest changed: update this test"
    (d / "exercise.toml").write_text(text.replace('bound = "bound.py"', line))
    if says is None:
        m = load_manifest(d)
        assert m.throughput.bound == (None if not line else "bound.py")
        return
    with pytest.raises(ManifestError) as e:
        load_manifest(d)
    msg = str(e.value)
    assert "\n" not in msg and str(d / "exercise.toml") in msg and says in msg, msg


def test_the_bound_is_protected(tmp_path):
    """A workspace cannot bring its own bound: the kit's copy runs, and an edited one is reported."""
    ex = find(SLUG)
    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copy2(ex.dir / "train.py", ws / "train.py")
    (ws / "bound.py").write_text("import time\n")
    sub = assemble(ex, "workspace", ws, tmp_path / "sub")
    assert sub.protected_changed == ["bound.py"]
    assert (sub.dir / "bound.py").read_bytes() == (ex.dir / "bound.py").read_bytes()


def test_a_throughput_grading_carries_the_fractions(tmp_path, monkeypatch):
    ex = find(SLUG)
    step_dt = {"main": 0.05, "broken": 0.2, "candidate": 0.05, "reference": 0.04, "bound": 0.025}
    calls = []

    def fake_run_role(ex_, script_dir, run_dir, role, device, nproc, script=None, **kw):
        calls.append((role, Path(script_dir), script))
        make_run(Path(run_dir), steps=32, step_dt=step_dt[role])
        return load_run(role, Path(run_dir))

    def fake_reference(ex_, device, nproc, progress, *args, **kw):
        return load_run("reference", make_run(tmp_path / "ref", steps=32, step_dt=0.04))

    monkeypatch.setattr("grader.grade.run_role", fake_run_role)
    monkeypatch.setattr("grader.grade.reference_run", fake_reference)
    res = grade(ex, GradeOptions(kind="solution", out_dir=tmp_path / "out", repeats=2))
    tp = GradeResult.read(tmp_path / "out" / "result.json").throughput
    assert tp["fraction_of_bound"] == pytest.approx(0.5) and tp["reference_fraction_of_bound"] == pytest.approx(0.625)
    assert tp["speedup"] == pytest.approx(4.0) and tp["bound_spread"] == pytest.approx(0.0)
    check = res.check("throughput")
    assert "50% of the compute bound's steps/s (reference 62%" in check.message
    assert check.required is ex.manifest.throughput.required is True  # speed is this exercise's fix
    # credit is the normalised speedup, once every required correctness check passed (not here: no params)
    assert not tp["counted"] and check.credit == 0.0 and not check.passed
    assert res.to_json()["throughput"]["fraction_of_bound"] == pytest.approx(0.5)
    # the bound ran the kit's bound.py from the kit's own copy of the exercise
    bound_calls = [(d, s) for r, d, s in calls if r == "bound"]
    assert len(bound_calls) == 2 and all(s == "bound.py" and d.name == "throughput-broken" for d, s in bound_calls)


def test_throughput_is_the_median_of_interleaved_round_ratios():
    order, rates = [], {"broken": [10, 10, 10, 10], "candidate": [99, 20, 30, 25], "reference": [30, 30, 30, 30]}

    class _Ev:
        def __init__(self, r):
            self.ranks = {0: type("O", (), {"steps_per_s": r})(), 1: type("O", (), {"steps_per_s": r + 1})()}

    def run(role, tag):
        order.append(role)
        return _Ev(rates[role][len([o for o in order if o == role]) - 1])

    tp = summarize(measure(run, rounds=3, warmup_rounds=1), suspicious_factor=2.0, pass_speedup=2.0)
    assert order == ["broken", "candidate", "reference"] * 4  # interleaved, warm-up first
    assert tp.speedup == pytest.approx(2.5) and tp.reference_speedup == pytest.approx(3.0)
    assert tp.normalized == pytest.approx(0.75) and tp.passed and not tp.suspicious
    assert tp.spread == pytest.approx((3.0 - 2.0) / 2.5)


@pytest.mark.parametrize("first, later, rounds, passed", [
    (1.86, 1.0, 3, False),   # one noisy round near the bar: two more, the median decides
    (4.0, 1.0, 1, True),     # far above the bar: one round is enough
    (1.0, 9.0, 1, False),    # below the bar: one round is enough
])
def test_a_quick_measurement_near_the_bar_takes_two_more_rounds(first, later, rounds, passed):
    from grader.checks.throughput import Spec, measure
    from grader.throughput import Measuring

    seen = []

    def run(role, tag):
        seen.append(tag)
        speed = 10.0 * (first if tag == "round0" else later) if role == "candidate" else 10.0
        return _Ev(speed)

    spec = Spec(name="throughput", target_speedup=2.5)  # pass bar 1.75x
    measured = measure(spec, Measuring(run=run, quick=True))
    assert len(measured["rounds"]) == rounds and measured["quick"]
    tp = summarize(measured["rounds"], spec.suspicious_factor, spec.pass_speedup)
    assert tp.passed is passed


# -- start-up beyond the broken script's and the reference's is charged to the candidate ------------

class _StartEv:
    """A role's run: ``steps`` step records per rank at ``rate`` steps/s, the first ``startup`` s
    after the rank's start record (parent receive times)."""

    def __init__(self, rate: float, startup: float, steps: int = 32):
        self.status = "ok"
        self.ranks = {r: type("O", (), {"steps_per_s": rate, "steps": steps})() for r in range(2)}
        self._startup = startup

    def events(self, rank):
        return [{"kind": "boot", "attempt": 0, "rt": 50.0}, {"kind": "start", "attempt": 0, "rt": 100.0},
                {"kind": "step", "attempt": 0, "rt": 100.0 + self._startup + rank * 0.1, "step": 1}]


def test_each_role_s_start_up_is_timed_from_its_start_record_to_its_first_step():
    rates, startup = {"broken": 10.0, "candidate": 40.0, "reference": 30.0}, {"broken": 1.0, "candidate": 5.0,
                                                                            "reference": 2.0}
    (r,) = measure(lambda role, tag: _StartEv(rates[role], startup[role]), rounds=1, warmup_rounds=0)
    assert r["startup_s"] == pytest.approx({role: v + 0.1 for role, v in startup.items()})  # the slower rank's
    assert r["intervals"] == {role: 29 for role in ("broken", "candidate", "reference")}


def _round(b: float, c: float, ref: float, rates=(2.0, 10.0, 10.0)) -> dict:
    """A round with these start-ups (s) and steps/s (broken, candidate, reference): a broken step
    takes 0.5 s, the others 0.1 s."""
    return {"broken": rates[0], "candidate": rates[1], "reference": rates[2],
            "startup_s": {"broken": b, "candidate": c, "reference": ref},
            "intervals": {"broken": 29, "candidate": 29, "reference": 29}}


@pytest.mark.parametrize("rounds, charge", [
    ([_round(1.5, 1.1, 1.1)], 0.0),     # within the slower of the other two (each less a step)
    ([_round(1.5, 1.1, 2.1)], 0.0),
    ([_round(1.5, 1.2, 1.1)], 0.1),     # the broken's first step is its slow pipeline, not start-up
    ([_round(1.5, 3.1, 2.1)], 1.0),     # a second beyond the reference's
    ([_round(1.5, 15.1, 2.1)], 13.0),   # every record featurised before step 1
    # one round's broken start-up twice the others' (a loaded machine) moves the median, not the charge
    ([_round(1.5, 11.1, 1.1), _round(7.5, 12.1, 1.1), _round(1.5, 10.1, 1.1)], 10.0),
    ([{"broken": 2.0, "candidate": 10.0, "reference": 10.0}], None),  # rounds of an older grading: no times
])
def test_the_charge_is_the_candidate_s_start_up_beyond_the_slower_of_the_others(rounds, charge):
    from grader.throughput import startup_charge

    got = startup_charge(rounds)
    assert got == (pytest.approx(charge) if charge is not None else None)


@pytest.mark.parametrize("extra, passed", [
    (0.0, True),    # 4.00x
    (0.5, True),    # 2.37x: a valid fix whose start-up is a little slower
    (1.4, False),   # 1.36x: start-up moved work out of the window it is measured in
    (3.0, False),   # 0.78x
])
def test_a_start_up_charge_can_take_a_speedup_below_the_bar(extra, passed):
    from types import SimpleNamespace

    from grader.checks.throughput import Spec, judge

    # less a step each: broken 1.0 - 0.1, reference 2.025 - 1/30, candidate 2.0 + extra + 1/40 - 1/40
    su = {"broken": 1.0, "candidate": 2.0 + extra - 1 / 30 + 1 / 40, "reference": 2.0}
    rounds = [{"broken": 10.0, "candidate": 40.0, "reference": 30.0, "startup_s": su,
               "intervals": {"broken": 29, "candidate": 29, "reference": 29}}] * 3
    spec = Spec(name="throughput", target_speedup=2.5)  # pass bar 1.75x
    ctx = SimpleNamespace(earlier=[], measurements={"throughput": {"rounds": rounds, "bound": False, "quick": False}})
    c = judge(spec, ctx)
    assert c.passed is passed, c.message
    assert c.evidence["speedup"] == pytest.approx(29 / (29 / 40.0 + extra) / 10.0, abs=1e-3)
    assert ("charged to its steps/s" in c.message) is (extra > 0)
    if extra:
        assert c.evidence["startup_charge_s"] == pytest.approx(extra) and c.evidence["uncharged_speedup"] == 4.0


def test_rounds_without_start_up_times_are_judged_as_before():
    tp = summarize([{"broken": 10.0, "candidate": 40.0, "reference": 30.0}], 2.0, 1.75)
    assert tp.speedup == 4.0 and tp.startup_charge_s is None
