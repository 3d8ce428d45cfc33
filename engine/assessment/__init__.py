"""One interface for what a task delivers and how it is judged (base.py), one module per answer
kind; a task's regression/classification kind is decided in engine/task_kind.py."""
from __future__ import annotations

from ..task_kind import CLASSIFICATION, REGRESSION, KindDecision, decide_kind, task_kind
from .base import Assessment
from .field import FieldAssessment
from .parameters import ParametersAssessment
from .series import SeriesAssessment

# Data_config.json ``answer.kind`` -> its implementation; "rows" is the default.
ANSWER_KINDS: dict[str, type[Assessment]] = {cls.name: cls for cls in (Assessment, SeriesAssessment, ParametersAssessment,
                                                                   FieldAssessment)}


def assessment_for(task) -> Assessment:
    """The assessment of ``task``'s answer kind."""
    return ANSWER_KINDS[getattr(task.resources.answer, "kind", "rows")](task)


def trivial_predictions(task) -> dict[str, bytes]:
    """Each trivial baseline's answer to the official test (the task's answer kind's)."""
    return assessment_for(task).trivial_predictions()


def trivial_or_error(task) -> dict[str, bytes] | str:
    """trivial_predictions(), or why the task's files cannot give them."""
    try:
        return trivial_predictions(task)
    except (OSError, KeyError, ValueError, IndexError) as exc:
        return str(exc)


__all__ = ["ANSWER_KINDS", "Assessment", "CLASSIFICATION", "KindDecision", "REGRESSION", "assessment_for",
           "decide_kind", "task_kind", "trivial_or_error", "trivial_predictions"]
