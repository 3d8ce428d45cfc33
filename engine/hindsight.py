"""Hindsight: what a search can only learn after its final commitment.

The official metric may not steer a search, so a search ranks its candidates by proxies: the
judge's J and the in-loop validation score. Whether those proxies rank candidates the way the
held-out metric does is the open question of every such system; this module answers it for one
run. After the final commitment, every candidate the search probed is scored officially (one
evaluate.py process for all of them) and the Spearman rank correlation is computed for each pair
of J, validation and official. All three are oriented so that higher is better, so a positive
correlation means the two agree on which candidates are better. A program probed again (a
mutation that left the team's program as it was, a rerun) is one candidate, not several: the
correlation is over distinct programs, each counted once, as repeats would only add ties that
agree with themselves.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from . import official as official_evaluation
from .artifacts import ArtifactStore
from .evaluation import evaluate_many
from .search.base import ProgramProbed
from .search.probe import JUDGEMENT_FILE
from .selection import ROUNDED, same
from .task import Task

MIN_CANDIDATES = 3  # below this a rank correlation says nothing
PAIRS = (("J", "validation"), ("J", "official"), ("validation", "official"))


@dataclass
class Candidate:
    """One probed candidate: a workflow probe, or a program (a tree node)."""

    label: str
    J: float | None
    validation: float | None
    official: dict = field(default_factory=dict)
    predictions: tuple[Path, str] | None = None  # (probe folder, predictions sha256)
    code: str | None = None
    program: str | None = None  # sha256 of the program it ran (None: it delivered none)

    @property
    def official_value(self) -> float | None:
        return self.official.get("value") if self.official.get("ok") else None


# Two steps of the sixth decimal the scores are kept to: a difference no larger is rounding.
RANK_TIE = 4 * ROUNDED


@dataclass
class Correlation:
    a: str
    b: str
    n: int            # candidates with both values
    rho: float | None  # None when it cannot be computed (say why)
    p: float | None = None
    why: str = ""

    def describe(self) -> str:
        if self.rho is None:
            return f"{self.a}~{self.b}: n/a ({self.why})"
        return f"{self.a}~{self.b}: ρ {self.rho:+.2f} (n={self.n}" + (f", p={self.p:.2g})" if self.p is not None else ")")


@dataclass
class Hindsight:
    candidates: list[Candidate]
    correlations: list[Correlation]
    higher_is_better: bool

    def to_dict(self) -> dict:
        return {"higher_is_better": self.higher_is_better,
                "correlations": [asdict(c) for c in self.correlations],
                "candidates": [{"label": c.label, "J": c.J, "validation": c.validation,
                                "official": c.official_value, "official_error": None if c.official.get("ok")
                                else c.official.get("error"), "program": c.program} for c in self.candidates]}

    def describe(self) -> str:
        return " · ".join(c.describe() for c in self.correlations)


def probed_candidates(run_dir: Path, programs: Iterable[ProgramProbed] = ()) -> list[Candidate]:
    """Every candidate a search probed: the workflow probes under probes/ (their summary and the
    judge's verdict), read from disk, so a search resumed after a crash sees the candidates of
    every attempt; then the ``programs`` it validated itself (``Search.programs_probed``)."""
    found: list[Candidate] = []
    for folder in sorted(Path(run_dir, "probes").glob("*/")):
        try:
            summary = json.loads((folder / "summary.json").read_text())
        except (OSError, ValueError):
            continue  # a probe cut off before it finished has nothing to rank
        if summary.get("status") == "stopped":
            continue
        metric = summary.get("metric") or {}
        judged = folder / JUDGEMENT_FILE
        try:
            j = json.loads(judged.read_text()).get("J") if judged.exists() else None
        except ValueError:
            j = None
        sha = summary.get("predictions_sha256")
        found.append(Candidate(folder.name, j, metric.get("value") if metric.get("ok") else None,
                               predictions=(folder, sha) if sha else None, program=program_sha(summary.get("final_code"))))
    found += [Candidate(p.label, None, p.validation, code=p.code, program=program_sha(p.code)) for p in programs]
    return found


def program_sha(code: str | None) -> str | None:
    return hashlib.sha256(code.encode("utf-8")).hexdigest() if isinstance(code, str) and code else None


def distinct_programs(candidates: list[Candidate]) -> list[Candidate]:
    """Each program once, as first probed (a candidate with no program stands alone)."""
    seen: set[str] = set()
    out = []
    for c in candidates:
        if c.program is not None:
            if c.program in seen:
                continue
            seen.add(c.program)
        out.append(c)
    return out


def score_officially(task: Task, candidates: list[Candidate], executor=None,
                     official: Callable[..., dict] | None = None, known: dict[str, dict] | None = None) -> None:
    """Fill each candidate's official score. Probes' saved predictions are scored together in
    one evaluate.py process, identical files once; a program is run on the task's data first
    (with ``executor``) unless ``known`` has its score already (keyed by its code).
    ``official`` replaces evaluate.py (tests' stand-ins)."""
    known = known or {}

    by_sha: dict[str, list[Candidate]] = {}
    for c in candidates:
        if c.predictions is not None:
            by_sha.setdefault(c.predictions[1], []).append(c)
        elif c.code is not None and c.code in known:
            c.official = known[c.code]
        elif c.code is not None and executor is not None:
            c.official = official_evaluation.official_for_code(task, c.code, executor)
        else:
            c.official = {"ok": False, "error": "the candidate delivered no predictions"}
    if official is not None:
        for sha, group in by_sha.items():
            score = official(task, group[0].predictions[0], sha)
            for c in group:
                c.official = score
        return
    files, groups = [], []
    for sha, group in by_sha.items():
        data = ArtifactStore(group[0].predictions[0] / "artifacts").read(sha)
        if data is None:
            for c in group:
                c.official = {"ok": False, "error": f"predictions {sha[:12]} are missing"}
            continue
        files.append(data)
        groups.append(group)
    for score, group in zip(evaluate_many(task, files), groups):
        for c in group:
            c.official = score


def rank_correlations(candidates: list[Candidate], higher_is_better: bool) -> list[Correlation]:
    """Spearman's ρ for each pair of J, validation and official over the candidates that have
    both, each program counted once, every score oriented so that higher is better."""
    sign = 1.0 if higher_is_better else -1.0
    candidates = distinct_programs(candidates)

    def value(c: Candidate, name: str) -> float | None:
        v = {"J": c.J, "validation": c.validation, "official": c.official_value}[name]
        if v is None or not math.isfinite(v):
            return None
        return v if name == "J" else sign * v

    out = []
    for a, b in PAIRS:
        pairs = [(value(c, a), value(c, b)) for c in candidates]
        pairs = [(x, y) for x, y in pairs if x is not None and y is not None]
        n = len(pairs)
        if a == "J" and all(c.J is None for c in candidates):
            out.append(Correlation(a, b, n, None, why="this search does not judge its candidates"))
            continue
        if n < MIN_CANDIDATES:
            out.append(Correlation(a, b, n, None, why=f"{n} candidate(s) with both; needs {MIN_CANDIDATES}"))
            continue
        xs, ys = tied_within_rounding([x for x, _ in pairs]), tied_within_rounding([y for _, y in pairs])
        if len(set(xs)) < 2 or len(set(ys)) < 2:
            out.append(Correlation(a, b, n, None, why="no spread beyond the scores' rounding: every candidate "
                                                      "scored the same"))
            continue
        from scipy.stats import spearmanr  # half a second to import: not before a search's end

        result = spearmanr(xs, ys)
        rho, p = float(result.statistic), _p_value(xs, ys, float(result.pvalue))
        out.append(Correlation(a, b, n, round(rho, 4), round(p, 4) if math.isfinite(p) else None))
    return out


def tied_within_rounding(values: list[float]) -> list[float]:
    """``values`` with neighbours (in sorted order) no further apart than the scores' rounding made
    one value, the smallest of their run: scores are kept to 6 decimals, so steps of 1e-6 order
    noise, and a correlation over that order would print a p-value for nothing."""
    scale = max(abs(v) for v in values)
    out = list(values)
    previous = anchor = None
    for k in sorted(range(len(values)), key=values.__getitem__):
        if previous is None or not same(values[k], previous, scale, abs_tol=RANK_TIE):
            anchor = values[k]
        out[k], previous = anchor, values[k]
    return out


def _p_value(xs, ys, asymptotic: float) -> float:
    """Two-sided p of Spearman's rho. Below 10 candidates the t approximation is wrong (three
    candidates in perfect order would get p = 0), so the p comes from the permutations of the
    pairings: all of them up to 7 candidates, else 5040 drawn with a fixed seed."""
    if len(xs) >= 10:
        return asymptotic
    from scipy.stats import permutation_test, rankdata

    rx, ry = rankdata(xs), rankdata(ys)
    result = permutation_test((rx,), lambda r: np.corrcoef(r, ry)[0, 1], permutation_type="pairings",
                              n_resamples=5040, alternative="two-sided", random_state=0)
    return float(result.pvalue)


def hindsight(task: Task, run_dir: Path, executor=None, official: Callable[..., dict] | None = None,
              known: dict[str, dict] | None = None, programs: Iterable[ProgramProbed] = ()) -> Hindsight:
    """After the final commitment (never inside a search): score every probed candidate
    officially and correlate the search's proxies with the official metric. ``known``: official
    scores already computed for programs, by their code (the search's ends); ``programs``: those
    the search validated itself (``Search.programs_probed``)."""
    candidates = probed_candidates(run_dir, programs)
    score_officially(task, candidates, executor, official, known)
    hib = task.metric.higher_is_better
    return Hindsight(candidates, rank_correlations(candidates, hib), hib)
