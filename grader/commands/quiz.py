"""``trainwreck quiz``: practise the quantitative questions alone. Asks them (all, by ``--topic``, or
the ``--id`` given), grades each answer with feedback and the derivation, and keeps progress in a
JSON state file. ``--answer ID=VALUE`` grades without asking (scripts, tests); ``--json`` prints
machine-readable verdicts. Exit code 1 when an answer given with ``--answer`` is wrong."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from grader import console
from grader.tools import quiz as Q


def _parse_answers(pairs: tuple[str, ...]) -> list[tuple[str, str]]:
    out = []
    for p in pairs:
        qid, sep, value = p.partition("=")
        if not sep or not qid.strip() or not value.strip():
            raise click.UsageError(f"--answer {p!r}: write it as ID=VALUE, e.g. mem-7b-state=112GB") from None
        out.append((qid.strip(), value.strip()))
    return out


def _status(state: Q.QuizState, qid: str) -> str:
    p = state.questions.get(qid)
    if p is None:
        return "new"
    return "solved" if p.solved else f"{p.attempts} tried"


def _print_verdict(q: Q.Question, v: Q.Verdict) -> None:
    mark = "CORRECT" if v.correct else "WRONG"
    console.text(f"{mark}  {q.id}: you said {v.given:g} {v.unit}".rstrip() + f"; {v.feedback}")
    if not v.correct:
        console.text(f"model answer: {v.expected:g} {v.unit} ({v.tolerance})".rstrip())
    console.text(f"derivation: {q.derivation.strip()}")
    if q.calc:
        console.text(f"reproduce: trainwreck calc {q.calc.command}")


@click.command("quiz")
@click.option("--topic", type=click.Choice(list(Q.TOPICS)), help="Only questions of this topic.")
@click.option("--id", "ids", multiple=True, help="Only this question (repeatable).")
@click.option("--answer", "answers", multiple=True, metavar="ID=VALUE",
              help="Grade this answer without asking, e.g. mem-7b-state=112GB (repeatable).")
@click.option("--list", "list_only", is_flag=True, help="List the questions and your progress; ask nothing.")
@click.option("--all", "ask_all", is_flag=True, help="Ask solved questions again too.")
@click.option("--reset", is_flag=True, help="Forget the progress of the selected questions (all, without --topic/--id).")
@click.option("--state", type=click.Path(path_type=Path, dir_okay=False), default=None,
              help="Progress file (default $TRAINWRECK_HOME/quiz-state.json or ~/.trainwreck/quiz-state.json).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (with --answer or --list).")
def command(topic, ids, answers, list_only, ask_all, reset, state, as_json):
    """Quantitative questions on distributed training, graded with a stated tolerance."""
    state_path = state or Q.default_state_path()
    try:
        bank = Q.load_bank()
        pairs = _parse_answers(answers)
        chosen = Q.select(bank, topic, tuple(ids) + tuple(i for i, _ in pairs))
        progress = Q.load_state(state_path)
    except Q.QuizError as e:
        raise click.UsageError(str(e)) from None
    if reset:
        progress = Q.forget(progress, [q.id for q in chosen])
        Q.save_state(state_path, progress)
        console.info(f"forgot the progress of {len(chosen)} question(s) in {state_path}")
        if not (pairs or list_only):
            return
    if list_only:
        _list(chosen, progress, as_json)
    elif pairs:
        _grade_given(bank, pairs, progress, state_path, as_json)
    elif as_json:
        raise click.UsageError("--json needs --answer ID=VALUE or --list (asking interactively prints text)") from None
    else:
        _ask(chosen, progress, state_path, ask_all)


def _list(chosen: list[Q.Question], progress: Q.QuizState, as_json: bool) -> None:
    if as_json:
        console.emit_json({"state": {k: v.model_dump() for k, v in progress.questions.items()},
                           "questions": [{"id": q.id, "topic": q.topic, "question": q.question, "unit": q.unit,
                                          "tolerance": q.tolerance.describe(q.unit), "depends_on": q.depends_on,
                                          "status": _status(progress, q.id)} for q in chosen]})
        return
    console.table(None, ["id", "topic", "unit", "status"],
                  [[q.id, q.topic, q.unit or "-", _status(progress, q.id)] for q in chosen])
    solved = sum(1 for q in chosen if _status(progress, q.id) == "solved")
    console.text(f"{solved} of {len(chosen)} solved")


def _grade_given(bank, pairs, progress, state_path, as_json) -> None:
    by_id = {q.id: q for q in bank}
    verdicts = []
    for qid, value in pairs:
        q = by_id[qid]
        try:
            v = Q.grade_answer(q, value)
        except Q.AnswerError as e:
            raise click.UsageError(f"--answer {qid}={value}: {e}") from None
        progress = Q.record(progress, v, value)
        verdicts.append((q, v))
    Q.save_state(state_path, progress)
    if as_json:
        console.emit_json({"verdicts": [v.to_json() | {"calc": q.calc.command if q.calc else None}
                                         for q, v in verdicts],
                           "correct": sum(v.correct for _, v in verdicts), "answered": len(verdicts),
                           "state": str(state_path)})
    else:
        for q, v in verdicts:
            _print_verdict(q, v)
    sys.exit(0 if all(v.correct for _, v in verdicts) else 1)


def _ask(chosen, progress, state_path, ask_all) -> None:
    todo = [q for q in chosen if ask_all or not (progress.questions.get(q.id) and progress.questions[q.id].solved)]
    if not todo:
        console.text("every selected question is solved; --all asks them again, --reset forgets the progress")
        return
    console.text(f"{len(todo)} question(s). Answer with a number, optionally with its unit (112GB, 104GiB, 98s); "
                 "'s' skips, 'q' stops. Progress: " + str(state_path))
    right = 0
    for n, q in enumerate(todo, 1):
        console.text(f"\n[{n}/{len(todo)}] {q.id} ({q.topic})")
        console.text(q.question.strip())
        while True:
            raw = click.prompt(f"answer ({q.unit or 'a number'}, {q.tolerance.describe(q.unit)})", default="",
                               show_default=False).strip()
            if raw.lower() in ("q", "quit"):
                console.text(f"stopped: {right} correct this time")
                return
            if raw.lower() in ("s", "skip", ""):
                break
            try:
                v = Q.grade_answer(q, raw)
            except Q.AnswerError as e:
                console.text(f"cannot read that: {e}")
                continue
            progress = Q.record(progress, v, raw)
            Q.save_state(state_path, progress)  # after every answer: quitting loses nothing
            _print_verdict(q, v)
            right += v.correct
            break
    console.text(f"\n{right} of {len(todo)} correct this time")
