"""Blends: one program that fits two or more of the tree's own programs and combines their
predictions (the mean for regression, a vote for labels, ties to the first part).

A blend is what a team that has run several good, different models can do and one agent
writing one program does not: averaging models whose errors differ lowers the variance of the
prediction. It is validated on the same folds as every node and committed by the same rule
(engine/search/tree.py: ahead of the root only when its gain over the root is beyond the
paired noise of the folds).

Each part is the complete program of a strategy in the library, embedded as text and run as a
module (its ``__main__`` guard keeps it from writing predictions): only its ``fit_predict`` is
called. So a blend stays one self-contained script a person can read and rerun.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from .strategies import get_strategy
from .strategy import CLASSIFY, FAMILIES, DataSpec, Strategy, family_of

KEY = "blend"
MAX_PARTS = 3
CONSTANT = frozenset({"mean_baseline", "majority_baseline"})  # one value for every row: nothing to average


class BlendError(ValueError):
    """The parts named are not a blend this library can render."""


def blendable(strategy: Strategy) -> bool:
    """A part must expose the frame's fit_predict: no epoch-trained model with its own main,
    no constant predictor, no blend of blends."""
    return strategy.key != KEY and not strategy.main and strategy.key not in CONSTANT


def runs(strategy: Strategy, params: dict) -> list[Strategy]:
    """The library strategies a program of ``strategy`` fits: a blend's parts, else itself."""
    return [get_strategy(key) for key, _ in params["parts"]] if strategy.key == KEY else [strategy]


def fallback(strategy: Strategy, params: dict) -> tuple[Strategy, dict]:
    """What to write when a configuration cannot be rendered (a setting outside its options):
    the strategy's conventional settings; a blend, which has none, gives way to its first part's."""
    first = runs(strategy, params)[0]
    return first, first.default_params()


def _parts(params: dict) -> list[tuple[Strategy, dict]]:
    raw = params.get("parts")
    if not isinstance(raw, (list, tuple)) or not 2 <= len(raw) <= MAX_PARTS:
        raise BlendError(f"a blend names 2 to {MAX_PARTS} parts as [[key, params], ...]; got {raw!r}")
    parts, seen = [], set()
    for item in raw:
        if not (isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], str)
                and isinstance(item[1], dict)):
            raise BlendError(f"a blend's part is [key, params]; got {item!r}")
        if item[0] == KEY:
            raise BlendError("a blend cannot be part of a blend")
        try:
            strategy = get_strategy(item[0])
        except KeyError:
            raise BlendError(f"a blend's part {item[0]!r} is no strategy of the library") from None
        if not blendable(strategy):
            raise BlendError(f"{strategy.key} cannot be part of a blend (it has no plain fit_predict)")
        resolved = strategy.resolve_params(item[1])
        mark = json.dumps([strategy.key, resolved], sort_keys=True, default=str)
        if mark in seen:
            raise BlendError(f"a blend names {strategy.key} {json.dumps(resolved, sort_keys=True)} twice")
        seen.add(mark)
        parts.append((strategy, resolved))
    return parts


def _quoted(source: str) -> str:
    """``source`` as a triple-quoted literal that reads like the program it holds."""
    return "'''\\\n" + source.replace("\\", "\\\\").replace("'''", "\\'\\'\\'") + "'''"


_COMBINE = {
    "mean": '''
def combine(predictions):
    """The mean of the parts' predictions, row by row."""
    return np.mean(np.vstack([np.asarray(p, dtype=float) for p in predictions]), axis=0)
''',
    "vote": '''
def combine(predictions):
    """Per row the label most parts predict; a tie goes to the earliest part (the best one)."""
    rows = list(zip(*[list(p) for p in predictions]))
    return np.array([max(row, key=row.count) for row in rows], dtype=np.asarray(predictions[0]).dtype)
''',
}

_RUN_PARTS = '''
def part_model(key, source):
    """The fit_predict of a part's program, run as a module so that it writes nothing."""
    namespace = {"__name__": f"blend_part_{key}"}
    exec(compile(source, f"<part {key}>", "exec"), namespace)
    return namespace["fit_predict"]


def fit_predict(X_train, y_train, X_new):
    return combine([part_model(key, source)(X_train, y_train, X_new) for key, _params, source in PARTS])
'''


class Blend(Strategy):
    """The strategy ``blend {"parts": [[key, params], ...]}``: not in the library's list (a
    planner never starts from one), offered by the tree's proposer once it has parts to blend."""

    def default_params(self) -> dict:
        return {"parts": []}

    def resolve_params(self, params: dict | None) -> dict:
        params = dict(params or {})
        unknown = set(params) - {"parts"}
        if unknown:
            raise BlendError(f"{KEY}: unknown parameter(s) {sorted(unknown)}")
        return {"parts": [[s.key, p] for s, p in _parts(params)]}

    def render(self, params: dict, spec: DataSpec, seed: int) -> str:
        parts = _parts(params)
        family = family_of(spec)
        # each part's own render refuses a family it does not apply to
        entries = ",\n".join(f"    ({s.key!r}, {dict(sorted(p.items()))!r},\n     "
                             f"{_quoted(s.render(p, spec, seed))})" for s, p in parts)
        source = ("# Each part is the whole program of a strategy this search already ran.\n"
                  f"PARTS = (\n{entries},\n)\n\n\n"
                  + _COMBINE["vote" if family == CLASSIFY else "mean"].strip("\n") + "\n\n\n"
                  + _RUN_PARTS.strip("\n"))
        framed = _Framed(key=KEY, title=title_of(parts), families=self.families, tags=self.tags, param_grid={},
                         summary=self.summary, source=source).render({}, spec, seed)
        # The frame's header names no parameters; a blend's header names its parts.
        resolved = {"parts": [[s.key, p] for s, p in parts]}
        return f"# strategy: {KEY} {json.dumps(resolved, sort_keys=True)}\n" + framed.split("\n", 1)[1]


@dataclass(frozen=True)
class _Framed(Strategy):
    """A body already written, which the frame must not read as a template (the parts'
    programs hold their own ``$``)."""

    source: str = ""

    def _assemble(self, resolved: dict) -> tuple[list[str], str, str]:
        return [], self.source, ""


def title_of(parts: list[tuple[Strategy, dict]]) -> str:
    return "Blend of " + " and ".join(s.title[0].lower() + s.title[1:] for s, _ in parts)


BLEND = Blend(key=KEY, title="Blend of the tree's programs", families=frozenset(FAMILIES),
              tags=frozenset({"ensemble"}), param_grid={"parts": ((),)},
              summary="Fits each part on the same rows and combines their predictions: the mean for\n"
                      "a number, a vote for a label (a tie goes to the first part, the best one).")
