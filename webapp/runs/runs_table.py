"""The home page's runs table: one page of a task's runs at a time, each with what a scientist
compares runs by (the official metric before and after, the baselines it had to beat, what it
cost), read straight out of the runs' JSON columns by the database: never a whole ``result`` (the
hindsight and every baseline in it) per row. A thousand runs took 0.25-0.95 s and 443 kB as one
list; a page is 25."""
from __future__ import annotations

import json
from dataclasses import dataclass

from django.core.paginator import Page, Paginator
from django.db.models.fields.json import KT

from webapp.tasks.models import Task

PAGE_SIZE = 25
_HEAVY = ("result", "checkpoint", "usage", "model_settings", "budget_left", "status_reason")


@dataclass(frozen=True)
class Score:
    value: float | None
    error: str = ""

    @classmethod
    def read(cls, ok, value, error="") -> "Score | None":
        if ok is None and value is None:
            return None
        if str(ok).lower() not in ("true", "1") or value is None:
            return cls(None, str(error or "no official score"))
        try:
            return cls(float(value))
        except (TypeError, ValueError):
            return cls(None, "not a number")


@dataclass(frozen=True)
class Baseline:
    name: str
    value: float


def _best_baseline(raw: str | None, higher_is_better: bool) -> Baseline | None:
    """The strongest trivial baseline (the single agent has its own column)."""
    try:
        baselines = json.loads(raw) if raw else {}
    except ValueError:
        return None
    scored = [Baseline(name, float(b["value"])) for name, b in (baselines or {}).items()
              if name != "single_agent" and isinstance(b, dict) and b.get("ok") and b.get("value") is not None]
    if not scored:
        return None
    return (max if higher_is_better else min)(scored, key=lambda b: b.value)


def runs_page(task: Task, number: int | str | None) -> Page:
    runs = (task.runs.order_by("-pk").defer(*_HEAVY)
            .annotate(final_ok=KT("result__final__official__ok"), final_value=KT("result__final__official__value"),
                      final_error=KT("result__final__official__error"),
                      initial_ok=KT("result__initial__official__ok"), initial_value=KT("result__initial__official__value"),
                      solo_ok=KT("result__baselines__single_agent__ok"),
                      solo_value=KT("result__baselines__single_agent__value"),
                      baselines_json=KT("result__baselines"),
                      cost=KT("usage__cost_usd"), tokens=KT("usage__tokens")))
    page = Paginator(runs, PAGE_SIZE).get_page(number)
    for run in page.object_list:
        run.final = Score.read(run.final_ok, run.final_value, run.final_error)
        run.initial = Score.read(run.initial_ok, run.initial_value)
        run.solo = Score.read(run.solo_ok, run.solo_value)
        run.best_baseline = _best_baseline(run.baselines_json, task.higher_is_better)
        run.cost_usd = _number(run.cost)
        tokens = _number(run.tokens)
        run.tokens_text = f"{int(tokens):,}" if tokens is not None else ""
    return page


def _number(raw) -> float | None:
    try:
        return None if raw is None else float(raw)
    except (TypeError, ValueError):
        return None


