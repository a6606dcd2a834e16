"""Everything a debrief shows, gathered from the session store (attempts carry their result.json
and the per-step figures taken when they were recorded), so a report regenerates from the
database alone. Templates only lay it out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grader.attempts import Attempt
from grader.report import figures
from grader.report.attachments import Attachments
from grader.report.attachments import collect as collect_attachments
from grader.report.summary import Summary, summarise
from grader.rubric import Rubric
from grader.sessions.calibration import Calibration, calibrate
from grader.sessions.live import ExerciseView, SessionView, session_view
from grader.sessions.models import Reveal, Session
from grader.sessions.models import now as models_now
from grader.sessions.store import Store

PLOTS = ("loss", "memory", "step_times", "throughput")
PLOT_TITLES = {"loss": "Loss against the reference", "memory": "Memory per rank over steps",
               "step_times": "Step-time distribution", "throughput": "Throughput rounds"}


@dataclass
class Plot:
    key: str
    title: str
    svg: str | None
    missing: str = ""  # why there is no plot
    alt: str = ""  # what it shows with its figures (the SVG's accessible name, the caption on paper)
    table: figures.Table | None = None  # its figures, one row per line, box or bar

    @property
    def text(self) -> str:
        """The plot's text alternative: its figures, or why there is none."""
        return self.alt or self.missing


@dataclass
class TimelineEntry:
    attempt: Attempt
    offset_s: float  # since the session's clock started
    added: int
    removed: int
    marks: list[str] = field(default_factory=list)  # revision window, passed over time (sessions.timeline)


@dataclass
class InterviewerScore:
    level: float | None  # a leaf's level or a parent's weighted mean
    descriptor: str  # the leaf's descriptor at that level
    note: str


@dataclass
class DimensionRow:
    id: str
    title: str
    depth: int
    leaf: bool
    question: str
    weight: float
    levels: list[str]
    strong_answer: str | None
    by: dict[str, InterviewerScore]
    spread: float | None
    status: str


@dataclass
class ExerciseReport:
    view: ExerciseView
    rubric: Rubric
    timeline: list[TimelineEntry]
    plots: list[Plot]
    calibration: Calibration
    dimensions: list[DimensionRow]
    diagnosis: str | None
    latest_checks: list[dict[str, Any]] = field(default_factory=list)
    latest_result: dict[str, Any] | None = None
    window_offset_s: float | None = None  # when the feedback round opened the revision window
    # what the candidate left in a design scenario's workspace; None for a script exercise
    attachments: Attachments | None = None

    @property
    def slug(self) -> str:
        return self.view.exercise.slug

    @property
    def latest_flags(self) -> list[dict[str, Any]]:
        """What the latest attempt touched that a fix has no reason to (result.json ``flags``)."""
        return list((self.latest_result or {}).get("flags") or [])

    @property
    def latest_isolation(self) -> str | None:
        """One line when the latest attempt's code ran unisolated; None when sandboxed or not recorded."""
        iso = (self.latest_result or {}).get("isolation")
        if not iso or iso.get("kind") == "sandbox":
            return None
        return f"unisolated: {iso.get('reason') or 'no sandbox'}"


@dataclass
class QuizRow:
    question: str  # its id
    text: str  # the question as asked ("" when the bank no longer has it)
    answer: str
    correct: bool
    expected: str  # the model answer with its unit and tolerance
    derivation: str
    feedback: str


@dataclass
class RevealEntry:
    """A hint or the reference asked for while the session was open (grader.sessions.reveals)."""

    reveal: Reveal
    offset_s: float  # since the session's clock started


@dataclass
class Report:
    session: Session
    clock: dict[str, Any]
    exercises: list[ExerciseReport]
    generated_at: str
    db: str
    quiz: list[QuizRow] = field(default_factory=list)
    reveals: list[RevealEntry] = field(default_factory=list)  # answers asked for while open, oldest first
    unwatched: str = ""  # why reads of solutions/ from outside the kit were not watched ("" when they were)

    @property
    def similar(self) -> list[tuple[str, Any]]:
        """(exercise, grader.sessions.similarity.Match): attempts close to the reference or another's."""
        return [(e.slug, m) for e in self.exercises for m in e.view.matches]

    @property
    def summary(self) -> Summary:
        """The box at the top: verdicts, time, attempts, recommendations, what to talk through."""
        return summarise(self.clock, self.exercises)

    @property
    def quiz_right(self) -> int:
        return sum(q.correct for q in self.quiz)


def _offset(session: Session, iso: str) -> float:
    from grader.sessions.models import parse_time

    return (parse_time(iso) - parse_time(session.started_at)).total_seconds()


def _diffstat(diff: str) -> tuple[int, int]:
    lines = diff.splitlines()
    return (sum(1 for x in lines if x.startswith("+") and not x.startswith("+++")),
            sum(1 for x in lines if x.startswith("-") and not x.startswith("---")))


def _plots(view: ExerciseView, with_pixels: bool) -> list[Plot]:
    """The four plots of the latest attempt that recorded its runs, each with its text alternative
    and table; the SVG only when pixels are wanted (matplotlib is imported only then)."""
    done = [a for a in view.done if a.series]
    latest = done[-1] if done else None
    if not view.exercise.graded:
        return []
    if latest is None:
        why = "no attempt recorded its runs"
        return [Plot(k, PLOT_TITLES[k], None, why) for k in PLOTS]
    main = (latest.series or {}).get("main")
    ref = (latest.series or {}).get("reference")
    firsts = [done[0], latest] if len(done) > 1 else [latest]
    times = [(f"#{a.n}", (a.series or {}).get("main")) for a in done]
    if ref and "ranks" in ref:
        times.append(("reference", ref))
    tp = (latest.result or {}).get("throughput")
    picked = {"loss": (figures.loss(main, ref, f"attempt {latest.n}"), "no loss recorded"),
              "memory": (figures.memory([(f"attempt {a.n}", (a.series or {}).get("main")) for a in firsts]),
                         "no memory samples recorded"),
              "step_times": (figures.step_times(times), "no step times recorded"),
              "throughput": (figures.throughput(tp),
                             "this exercise has no throughput check" if tp is None else "no measured rounds")}
    if with_pixels:
        from grader.report import plots  # matplotlib: only when pixels are wanted
    out = []
    for k in PLOTS:
        pd, why = picked[k]
        if pd is None:
            out.append(Plot(k, PLOT_TITLES[k], None, why))
        else:
            out.append(Plot(k, PLOT_TITLES[k], plots.draw(pd) if with_pixels else None, "",
                            figures.alt(pd), figures.table(pd)))
    return out


def _dimensions(rubric: Rubric, view: ExerciseView, cal: Calibration) -> list[DimensionRow]:
    scored = {sh.interviewer: rubric.score({k: v for k, v in sh.level_map().items()
                                            if (dim := rubric.dimension(k)) is not None and dim.is_leaf
                                            and v in rubric.levels})
              for sh in view.sheets}
    agreement = {d.id: d for d in cal.dimensions}
    rows = []
    for d, depth, _ in rubric.walk():
        by = {}
        for sh in view.sheets:
            level = scored[sh.interviewer].get(d.id)
            note = sh.levels[d.id].note if d.id in sh.levels else ""
            desc = d.descriptor(int(level)) if (level is not None and d.is_leaf) else ""
            by[sh.interviewer] = InterviewerScore(level, desc, note)
        a = agreement.get(d.id)
        rows.append(DimensionRow(d.id, d.title, depth, d.is_leaf, d.question, d.weight, list(d.levels),
                                 d.strong_answer, by, a.spread if a else None, a.status if a else "unscored"))
    return rows


def exercise_report(session: Session, view: ExerciseView, with_pixels: bool = True) -> ExerciseReport:
    rubric = view.rubric
    timeline = []
    for a in view.attempts:
        plus, minus = _diffstat(a.diff)
        timeline.append(TimelineEntry(a, _offset(session, a.started_at), plus, minus, view.marks.get(a.n, [])))
    cal = calibrate(rubric, view.sheets)
    latest = view.latest
    return ExerciseReport(view=view, rubric=rubric, timeline=timeline, plots=_plots(view, with_pixels),
                          calibration=cal, dimensions=_dimensions(rubric, view, cal),
                          diagnosis=view.exercise.diagnosis,
                          latest_checks=list((latest.result or {}).get("checks", [])) if latest else [],
                          latest_result=latest.result if latest else None,
                          window_offset_s=_offset(session, view.window.start) if view.window else None,
                          attachments=None if view.exercise.graded else collect_attachments(
                              view.exercise.workspace, view.exercise.slug, view.exercise.diagnosis))


def quiz_rows(answers: list[dict[str, Any]]) -> list[QuizRow]:
    """The session's quantitative answers with the question text and the model answer, from the
    stored verdicts (the bank is read only for the question's wording)."""
    if not answers:
        return []
    from grader.tools.quiz import load_bank

    try:
        bank = {q.id: q for q in load_bank()}
    except Exception:  # a broken bank must not stop a debrief: the stored verdicts stand alone
        bank = {}
    out = []
    for a in answers:
        v = a["verdict"]
        q = bank.get(a["question"])
        out.append(QuizRow(a["question"], q.question if q else "", a["answer"], a["correct"],
                           f"{v.get('expected')} {v.get('unit', '')} ({v.get('tolerance', '')})".strip(),
                           v.get("derivation", ""), v.get("feedback", "")))
    return out


def gather(store: Store, ref: str, with_pixels: bool = True) -> Report:
    sv: SessionView = session_view(store, ref)
    return Report(sv.session, sv.clock(), [exercise_report(sv.session, ev, with_pixels) for ev in sv.exercises],
                  models_now(), str(store.path), quiz_rows(sv.quiz),
                  reveals=[RevealEntry(r, _offset(sv.session, r.at)) for r in sv.reveals], unwatched=sv.unwatched)


# ---- several candidates on the same exercise ---------------------------------------------------
@dataclass
class CompareRow:
    session: Session
    exercise: ExerciseReport
    first_pass_s: float | None  # time from the clock's start to the first passing attempt
    mean_overall: float | None  # mean over interviewers of the whole-rubric score
    top: dict[str, float | None]  # top-level dimension -> mean over interviewers


@dataclass
class Comparison:
    slug: str
    title: str
    rubric: Rubric
    checks: list[str]
    rows: list[CompareRow]
    generated_at: str


def compare(store: Store, refs: list[str], slug: str | None = None) -> Comparison:
    from grader.sessions.errors import SessionError

    sessions = [store.session(r) for r in refs]
    if len({s.id for s in sessions}) < 2:
        raise SessionError(f"--compare needs two or more different sessions, got {len({s.id for s in sessions})}; "
                           "give another session id, or drop --compare for one debrief")
    if slug is None:
        common = set.intersection(*[{sx.slug for sx in store.exercises(s.id)} for s in sessions])
        if len(common) != 1:
            raise SessionError(f"the sessions share {len(common)} exercises ({', '.join(sorted(common)) or 'none'}); "
                               "name the one to compare with --exercise")
        slug = common.pop()
    rows, checks = [], []
    for s in sessions:
        sv = session_view(store, s.id)
        ev = next((e for e in sv.exercises if e.exercise.slug == slug), None)
        if ev is None:
            raise SessionError(f"session {s.id} ({s.candidate}) has no exercise {slug!r}; compare sessions on the same exercise")
        er = exercise_report(s, ev, with_pixels=False)
        first = next((a for a in ev.done if a.passed), None)
        overall = [v for v in er.calibration.overall.values() if v is not None]
        top = {}
        for d in er.rubric.dimensions:
            vals = [x for x in (row.by[w].level for row in er.dimensions if row.id == d.id for w in row.by) if x is not None]
            top[d.id] = sum(vals) / len(vals) if vals else None
        for c in er.latest_checks:
            if c["name"] not in checks:
                checks.append(c["name"])
        rows.append(CompareRow(s, er, _offset(s, first.started_at) if first else None,
                               sum(overall) / len(overall) if overall else None, top))
    first_report = rows[0].exercise  # the first session's title and rubric head the comparison
    return Comparison(slug, first_report.view.exercise.title, first_report.rubric, checks, rows, models_now())
