"""The judge's rubric: its criteria, its scale and the format of its answer, written into the
judge's prompt (engine/judge.py) and read by whoever answers it (the offline judge,
engine/offline/search_roles.py). Below the gateway, so that a model backend can read it."""
from __future__ import annotations

CRITERIA = ("goal_alignment", "collaboration_efficiency", "output_quality", "answer_plausibility")
# output_quality of a validation score equal to the best trivial baseline's: above it the
# quality is earned skill up to 1; below it the quality still orders candidates (a judge that
# gave every one of them 0 would let J rank them by their tokens).
OUTPUT_QUALITY_AT_BASELINE = 0.2
JUDGE_PROCEDURE = (
    "Judge one execution of a research team. Score each criterion in [0, 1]: goal_alignment (did the "
    "team deliver what the task asks, in its contract), collaboration_efficiency (retries, wasted calls, "
    "tokens for what was achieved), output_quality (the validation score against the trivial baselines' "
    "scores on the same folds, shown beside it: the best baseline's score is "
    f"{OUTPUT_QUALITY_AT_BASELINE}, a perfect score is 1, in proportion between; below the best baseline "
    f"keep ranking: under {OUTPUT_QUALITY_AT_BASELINE} and the further below the lower, twice the "
    f"baseline's distance from a perfect score is {OUTPUT_QUALITY_AT_BASELINE / 2:g}, never 0 for a "
    "validated answer), "
    "answer_plausibility (are the values believable; do the public checks support them). "
    "Ground every score in the evidence shown; do not reward claims the evidence does not support."
)
ANSWER_FORMAT = ('Reply with one JSON object only: {"goal_alignment": {"score": <0..1>, "feedback": "..."}, '
                 '"collaboration_efficiency": {...}, "output_quality": {...}, "answer_plausibility": {...}}')
