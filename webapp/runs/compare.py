"""Two or more runs side by side (the same task or not, any search or model): the official
metric of their initial and final workflows, the baselines, cost and wall time, their J curves
overlaid (static/js/compare.js) and the diff of their final workflows against the first run's.
Every run must be visible to the person (visibility.run_for: 404 otherwise, as for any run)."""
from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from . import visibility
from .models import Run
from .presenters import score_series, side_by_side

MAX_RUNS = 6


class CompareError(ValueError):
    pass


def run_ids(values: list[str]) -> list[int]:
    """The run ids asked for (``?runs=3&runs=5`` or ``?runs=3,5``), in order, without repeats."""
    ids: list[int] = []
    for value in values:
        for part in value.split(","):
            part = part.strip()
            if not part:
                continue
            if not part.isascii() or not part.isdigit():
                raise CompareError(f"run id {part!r} is not a number")
            if int(part) not in ids:
                ids.append(int(part))
    if len(ids) < 2:
        raise CompareError("choose at least two runs to compare")
    if len(ids) > MAX_RUNS:
        raise CompareError(f"compare at most {MAX_RUNS} runs at once (got {len(ids)})")
    return ids


def _official(entry: dict | None) -> float | None:
    official = (entry or {}).get("official") or {}
    return official.get("value") if official.get("ok") else None


def wall_seconds(run: Run) -> float | None:
    """From the first event to the last (a run's own clock; a suspended wait for a person counts)."""
    first = run.events.order_by("seq").values_list("ts", flat=True).first()
    last = run.events.order_by("-seq").values_list("ts", flat=True).first()
    if first is not None and last is not None:
        return round(last - first, 1)
    if run.started and run.finished:
        return round((run.finished - run.started).total_seconds(), 1)
    return None


def summary(run: Run) -> dict:
    """One column of the comparison."""
    result = run.result or {}
    usage = run.usage or {}
    version = run.final_version  # what was scored, never an edit not adopted
    initial, final = _official(result.get("initial")), _official(result.get("final"))
    higher = run.task.higher_is_better
    gain = None
    if initial is not None and final is not None:
        gain = (final - initial) if higher else (initial - final)
    return {"run": run, "task": run.task, "metric": run.task.metric_name, "higher_is_better": higher,
            "model": run.model or "offline provider", "initial": initial, "final": final, "gain": gain,
            "initial_J": (result.get("initial") or {}).get("J"), "final_J": (result.get("final") or {}).get("J"),
            # a trivial baseline handed in as the final, or one no candidate beat (engine/selection.Unbeaten)
            "final_verdict": (result.get("final") or {}).get("verdict", ""),
            "final_baseline": ((result.get("final") or {}).get("baseline") or "").replace("_", " "),
            "searched": _official((result.get("final") or {}).get("searched")),
            "searched_J": ((result.get("final") or {}).get("searched") or {}).get("J"),
            "baselines": {k.replace("_", " "): _official({"official": v}) for k, v in (result.get("baselines") or {}).items()},
            # the final team's lead over each baseline, beyond the test set's noise or not (engine/official_gap.py)
            "gaps": {k.replace("_", " "): g for k, g in (result.get("gaps") or {}).items()},
            "calls": usage.get("calls"), "tokens": usage.get("tokens"), "cost_usd": usage.get("cost_usd"),
            "wall_s": wall_seconds(run), "version": version,
            # the search's own count (a search without a judge has no judgements to count)
            "iterations": result.get("iterations", (run.checkpoint or {}).get("n", 0)),
            # a person's word only: a policy's automatic approval is not someone's decision
            "decisions": run.mutations.filter(decided_by__startswith="user:").count(),
            "policy_decisions": run.mutations.filter(decided_by__startswith="policy:").count()}


def comparison(runs: list[Run]) -> dict:
    columns = [summary(r) for r in runs]
    base = columns[0]
    diffs = []
    for col in columns[1:]:
        if base["version"] and col["version"]:
            rows = side_by_side(base["version"].data, col["version"].data)
            diffs.append({"left": base, "right": col, "rows": rows,
                          "changed": sum(1 for r in rows if r.tag != "equal")})
        else:
            diffs.append({"left": base, "right": col, "rows": [], "changed": None})
    baseline_rows = [{"name": name, "values": [c["baselines"].get(name) for c in columns]}
                     for name in sorted({name for c in columns for name in c["baselines"]})]
    series = [{"run": c["run"].pk, "label": f"run {c['run'].pk} · {c['task'].name} · {c['run'].search}",
               **score_series(c["run"])} for c in columns]
    return {"columns": columns, "diffs": diffs, "baseline_rows": baseline_rows, "series": series,
            "same_task": len({(c["task"].name, c["metric"]) for c in columns}) == 1}


def compare_page(request: HttpRequest) -> HttpResponse:
    try:
        ids = run_ids(request.GET.getlist("runs"))
    except CompareError as exc:
        return render(request, "runs/compare.html", {"error": str(exc)}, status=400)
    runs = [visibility.run_for(request.user, pk)[0] for pk in ids]
    return render(request, "runs/compare.html", comparison(runs))
