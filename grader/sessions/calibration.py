"""Calibration between interviewers who scored the same exercise independently: per dimension,
each one's score, the spread, and a flag where two of them are two or more levels apart (the
dimensions a debrief must talk through before the scores mean anything)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from grader.rubric import Rubric
from grader.sessions.models import ScoreSheet

APART = 2.0  # levels: a spread this large is flagged


@dataclass
class DimensionAgreement:
    id: str
    title: str
    depth: int
    leaf: bool
    scores: dict[str, float | None]  # interviewer -> level (leaf) or weighted mean (parent); None unscored
    spread: float | None  # max - min over the interviewers who scored it (None: fewer than two did)
    status: str  # agree | adjacent | apart | single | unscored

    @property
    def flagged(self) -> bool:
        return self.status == "apart"


@dataclass
class Calibration:
    interviewers: list[str]
    dimensions: list[DimensionAgreement] = field(default_factory=list)
    overall: dict[str, float | None] = field(default_factory=dict)  # interviewer -> whole-rubric score

    @property
    def flagged(self) -> list[DimensionAgreement]:
        return [d for d in self.dimensions if d.flagged]

    def summary(self) -> dict[str, Any]:
        """Over the leaves at least two interviewers scored: the share scored identically and the
        share within one level."""
        spreads = [d.spread for d in self.dimensions if d.leaf and d.spread is not None]
        n = len(spreads)
        return {"leaves_compared": n,
                "exact": round(sum(s == 0 for s in spreads) / n, 3) if n else None,
                "within_one": round(sum(s <= 1 for s in spreads) / n, 3) if n else None,
                "flagged": [d.id for d in self.flagged]}

    def to_json(self) -> dict[str, Any]:
        return {"interviewers": self.interviewers, "overall": self.overall, "summary": self.summary(),
                "dimensions": [{**asdict(d), "flagged": d.flagged} for d in self.dimensions]}


def _status(values: list[float]) -> tuple[float | None, str]:
    if not values:
        return None, "unscored"
    if len(values) == 1:
        return None, "single"
    spread = round(max(values) - min(values), 3)
    if spread >= APART:
        return spread, "apart"
    return spread, "agree" if spread == 0 else "adjacent"


def calibrate(rubric: Rubric, sheets: list[ScoreSheet]) -> Calibration:
    per = {s.interviewer: rubric.score(_known(rubric, s.level_map())) for s in sheets}
    cal = Calibration(interviewers=sorted(per), overall={k: v[""] for k, v in sorted(per.items())})
    for d, depth, _ in rubric.walk():
        scores = {who: per[who].get(d.id) for who in cal.interviewers}
        spread, status = _status([v for v in scores.values() if v is not None])
        cal.dimensions.append(DimensionAgreement(d.id, d.title, depth, d.is_leaf, scores, spread, status))
    return cal


def _known(rubric: Rubric, levels: dict[str, int]) -> dict[str, int]:
    """Scores of leaves the rubric still has (a rubric edited since the scoring drops the others)."""
    leaves = {d.id for d in rubric.leaves()}
    return {k: v for k, v in levels.items() if k in leaves and v in rubric.levels}
