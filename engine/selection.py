"""Noise-aware selection: is a candidate's validation gain over the incumbent real?

Both programs are validated on the same folds (same seed, same split plan), so their fold
scores pair up. The gain counts only when its mean over the folds exceeds ``Z`` standard errors
of the paired differences: a change that only re-rolled a seed, or moved the score by less
than the folds disagree with each other, is noise, and selecting on it would accept noise.

Two scores that differ by float noise alone (a sum taken in another order, a round trip through
text) are the same score everywhere a verdict is written (``same``, ``better``): a lead of
+1.1e-16 beats nothing. And when a trivial baseline, scored on the very folds a search validated
its candidates on, beats every one of them, the search says so and hands the baseline in
(``unbeaten_baseline``, applied to every search's outcome by engine/search/base.py).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterable

Z = 2.0  # about a one-sided 95 % bound for 5 paired folds (t(4) = 2.13); simple to state
REL_TOL = 1e-9  # far above float rounding (1e-16), far below any difference a metric means
# Validation keeps fold scores and the baselines' means to 6 decimals (engine/validation.py), so
# two scores compared through them agree only to half a unit of the sixth decimal.
ROUNDED = 5e-7


def same(a: float, b: float, scale: float = 0.0, abs_tol: float = 0.0) -> bool:
    """``a`` and ``b`` are one score up to float noise: relative to the larger, and absolutely
    to ``REL_TOL`` of ``scale`` (the magnitude of the scores compared: two r2 near 0 are measured
    against the r2 of the others, not against each other)."""
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=max(abs_tol, REL_TOL * abs(scale)))


def better(a: float, b: float, higher_is_better: bool, scale: float = 0.0, abs_tol: float = 0.0) -> bool:
    """``a`` beats ``b`` in the metric's direction by more than float noise."""
    if same(a, b, scale, abs_tol):
        return False
    return a > b if higher_is_better else a < b


@dataclass(frozen=True)
class Gain:
    significant: bool
    mean: float        # mean paired improvement, positive = better in the metric's direction
    noise: float       # Z standard errors of the paired differences
    folds: int
    worse: bool = False  # a loss beyond the paired noise: worse, not merely no better

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        if self.significant:
            said = f"beyond the paired noise ±{self.noise:.3g}"
        elif self.worse:
            # "within the noise" would read as a tie; a loss many times the noise is a loss
            times = f" ({-self.mean / self.noise:.3g}x it)" if self.noise > 0 else ""
            said = f"a loss, worse beyond the paired noise ±{self.noise:.3g}{times}"
        else:
            said = f"within the paired noise ±{self.noise:.3g}"
        return f"validation gain {self.mean:+.4g} is {said} over {self.folds} folds"

    def verdict(self) -> str:
        """What the gain makes of the candidate, in a few words."""
        return "an improvement" if self.significant else "worse" if self.worse else "noise, not an improvement"


def paired_gain(candidate: dict | None, incumbent: dict | None, higher_is_better: bool, z: float = Z) -> Gain | None:
    """The gain of ``candidate`` over ``incumbent`` (validation metric dicts with ``split_values``),
    or None when they cannot be paired (a failed validation, different folds)."""
    a = (candidate or {}).get("split_values") if (candidate or {}).get("ok") else None
    b = (incumbent or {}).get("split_values") if (incumbent or {}).get("ok") else None
    if not a or not b or len(a) != len(b) or (candidate or {}).get("validation") != (incumbent or {}).get("validation"):
        return None
    sign = 1.0 if higher_is_better else -1.0
    diffs = [sign * (x - y) for x, y in zip(a, b)]
    k = len(diffs)
    mean = sum(diffs) / k
    # Identical fold scores (a seed re-roll of a deterministic model) have no noise and no gain,
    # and fold scores that differ by float noise alone have none either, nor any loss.
    scale = max(abs(x) for x in (*a, *b))
    up, down = better(mean, 0.0, True, scale), better(mean, 0.0, False, scale)
    if k < 2:
        return Gain(up, mean, 0.0, k, down)
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (k - 1))
    noise = z * sd / math.sqrt(k)
    return Gain(up and mean > noise, mean, noise, k, down and -mean > noise)


# --- a trivial baseline the search did not beat ----------------------------------------------------
@dataclass(frozen=True)
class Unbeaten:
    """A trivial baseline that beat every candidate a search validated, on the very same folds.

    ``within_noise`` counts the candidates it beat only by less than the folds disagree with
    each other: then the baseline is not shown to be better, and the search's own final stands
    (handing in a baseline on a difference the folds cannot tell from noise would throw away a
    program that may be far better on the test set)."""

    baseline: str               # its name (engine/baselines.py: constant, nearest_neighbour)
    value: float                # its mean over the folds
    best: float                 # the best candidate's mean over the same folds
    candidates: int             # candidates that validated
    metric: str
    higher_is_better: bool
    within_noise: int = 0       # candidates behind it by less than the paired noise of their folds
    noise: float = 0.0          # that noise for the best candidate (Z standard errors), 0 when unknown
    folds: int = 0

    @property
    def beyond_noise(self) -> bool:
        return self.within_noise == 0

    def to_dict(self) -> dict:
        return {**asdict(self), "beyond_noise": self.beyond_noise}

    def describe(self) -> str:
        name = self.baseline.replace("_", " ")
        direction = "higher" if self.higher_is_better else "lower"
        scores = (f"on the search's own validation folds it scores {self.metric} {self.value:.4g}, the best of the "
                  f"{self.candidates} validated candidate(s) {self.best:.4g} ({direction} is better)")
        if not self.beyond_noise:
            noise = f" ±{self.noise:.3g} over {self.folds} folds" if self.noise else ""
            return (f"no candidate beat the {name} baseline: {scores}, but {self.within_noise} of them trail it "
                    f"within the paired noise{noise}, so the folds cannot tell them apart")
        return f"found nothing better than the {name} baseline: {scores}, every one of them worse beyond the noise"


def unbeaten_baseline(validations: Iterable[dict | None], higher_is_better: bool, z: float = Z) -> Unbeaten | None:
    """The best trivial baseline when it beats every candidate that validated, each compared on
    its own folds (``validation["baselines"]``: each baseline's mean on the folds the candidate
    was scored on), beyond float noise and the rounding of those means; None when some candidate
    beats or ties it, or when no candidate validated beside a baseline (nothing to compare).
    Candidates whose validation failed beat nothing. Where the baseline's score on each fold is
    known (``baseline_split_values``), each candidate is also paired with it fold by fold, and
    those it trails by less than ``z`` standard errors are counted as within the noise."""
    sign = 1.0 if higher_is_better else -1.0
    pick = max if higher_is_better else min
    beaten: list[tuple[float, str, float, str, Gain | None]] = []
    for v in validations:
        if not v or not v.get("ok") or not isinstance(v.get("value"), (int, float)) or not math.isfinite(v["value"]):
            continue
        refs = {n: float(b) for n, b in (v.get("baselines") or {}).items()
                if isinstance(b, (int, float)) and math.isfinite(b)}
        if not refs:
            return None  # a candidate with nothing on its folds to compare with: no verdict
        name = pick(refs, key=refs.get)
        value = float(v["value"])
        if not better(refs[name], value, higher_is_better, max(abs(refs[name]), abs(value)), ROUNDED):
            return None
        folds = (v.get("baseline_split_values") or {}).get(name)
        gain = paired_gain({"ok": True, "split_values": folds, "validation": v.get("validation")}, v,
                           higher_is_better, z) if folds else None
        beaten.append((value, name, refs[name], str(v.get("metric") or ""), gain))
    if not beaten:
        return None
    best, name, ref, metric, gain = max(beaten, key=lambda b: sign * b[0])
    within = sum(1 for *_, g in beaten if g is not None and not g.significant)
    return Unbeaten(name, ref, best, len(beaten), metric, higher_is_better, within,
                    gain.noise if gain else 0.0, gain.folds if gain else 0)
