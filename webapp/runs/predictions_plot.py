"""The final workflow's predictions beside the held-out truth, for people, once the run is over:
the prediction-vs-truth and residual plots that were only inside a tree run's champion zip. The
held-out answers are shown only after the final commitment (the search never sees them); a run
still going, or one whose final workflow delivered nothing, has no plot and says why."""
from __future__ import annotations

import math
from pathlib import Path

from django.http import HttpRequest, JsonResponse

from engine.bundle.parts import PartMissing, heldout_pairs
from engine.ending import FINAL_PREDICTIONS
from engine.official import heldout_truth
from engine.task import load_task

from . import visibility
from .models import Run, RunStatus

MAX_POINTS = 5000  # a plot of more points says nothing more; the rest are sampled evenly


def prediction_plot_data(run: Run) -> dict:
    """{"points": [{"id", "truth", "prediction", "residual", "x"}], "features", "unmatched", ...} or
    {"missing": why}."""
    if run.status not in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED) or not run.result:
        return {"missing": "the held-out comparison is drawn once the run has made its final commitment"}
    path = Path(run.run_dir) / FINAL_PREDICTIONS
    if not path.is_file():
        return {"missing": "the final workflow delivered no predictions to compare"}
    try:
        task = load_task(Path(run.task.folder))
        truth = heldout_truth(task)
        if truth is None:
            return {"missing": "the task has no held-out answer key to compare with"}
        pairs = heldout_pairs(task, path.read_bytes()[:200_000_000], truth)
    except (PartMissing, OSError, ValueError, KeyError) as exc:
        return {"missing": f"no comparison: {exc}"}
    numeric = pairs.numeric()
    if numeric is None:  # classes: a confusion count, not a scatter
        counts: dict[tuple[str, str], int] = {}
        for t, p in zip(pairs.truth, pairs.prediction):
            counts[(t, p)] = counts.get((t, p), 0) + 1
        return {"kind": "classes", "metric": run.task.metric_name, "unmatched": pairs.unmatched, "n": len(pairs.ids),
                "cells": [{"truth": t, "prediction": p, "count": c} for (t, p), c in sorted(counts.items())]}
    truth_values, predicted = numeric
    step = max(1, math.ceil(len(truth_values) / MAX_POINTS))
    points = [{"id": pairs.ids[k], "truth": truth_values[k], "prediction": predicted[k],
               "residual": predicted[k] - truth_values[k], "x": pairs.x[k] if k < len(pairs.x) else []}
              for k in range(0, len(truth_values), step)]
    return {"kind": "values", "metric": run.task.metric_name, "features": pairs.features, "points": points,
            "n": len(truth_values), "shown": len(points), "unmatched": pairs.unmatched}


def prediction_plot_json(request: HttpRequest, run_id: int) -> JsonResponse:
    run, _ = visibility.run_for(request.user, run_id)
    return JsonResponse(prediction_plot_data(run))
