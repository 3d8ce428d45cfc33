"""Noise-aware selection: is a candidate's validation gain over the incumbent real?

Both programs are validated on the same folds (same seed, same split plan), so their fold
scores pair up. The gain counts only when its mean over the folds exceeds ``Z`` standard errors
of the paired differences: a change that only re-rolled a seed, or moved the score by less
than the folds disagree with each other, is noise, and selecting on it would accept noise.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

Z = 2.0  # about a one-sided 95 % bound for 5 paired folds (t(4) = 2.13); simple to state


@dataclass(frozen=True)
class Gain:
    significant: bool
    mean: float        # mean paired improvement, positive = better in the metric's direction
    noise: float       # Z standard errors of the paired differences
    folds: int

    def to_dict(self) -> dict:
        return asdict(self)

    def describe(self) -> str:
        verdict = "beyond" if self.significant else "within"
        return (f"validation gain {self.mean:+.4g} is {verdict} the paired noise ±{self.noise:.3g} "
                f"over {self.folds} folds")


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
    if k < 2:
        return Gain(mean > 0, mean, 0.0, k)
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (k - 1))
    noise = z * sd / math.sqrt(k)
    # Identical fold scores (a seed re-roll of a deterministic model) have no noise and no gain.
    return Gain(mean > noise and mean > 1e-12 * max(1.0, *(abs(x) for x in b)), mean, noise, k)
