"""One interface for what a task delivers and how it is judged (base.py), one module per answer
kind, and the one place a task's regression/classification kind is decided (kind.py)."""
from __future__ import annotations

from .base import Assessment
from .kind import CLASSIFICATION, REGRESSION, KindDecision, decide_kind, task_kind
from .field import FieldAssessment
from .parameters import ParametersAssessment
from .series import SeriesAssessment

# Data_config.json ``answer.kind`` -> its implementation; "rows" is the default.
ANSWER_KINDS: dict[str, type[Assessment]] = {cls.name: cls for cls in (Assessment, SeriesAssessment, ParametersAssessment,
                                                                   FieldAssessment)}


def assessment_for(task) -> Assessment:
    """The assessment of ``task``'s answer kind."""
    return ANSWER_KINDS[getattr(task.resources.answer, "kind", "rows")](task)


__all__ = ["ANSWER_KINDS", "Assessment", "CLASSIFICATION", "KindDecision", "REGRESSION", "assessment_for",
           "decide_kind", "task_kind"]
