"""Does the science hold on every example task? For each task folder in examples/: the best
trivial baseline of its answer kind (constant or nearest neighbour; persistence or series mean;
each parameter's range middle), the example's own hand-written baseline (reference_baseline.py,
documented in its README and never shown to the scientist), the single-agent workflow, and the team's initial and
final workflow for each search, all scored officially by the task's evaluate.py. Beside them:
the official score of the candidate with the best validation (what shipping the best validation
score, with no noise rule, would have given); whether the final's plausibility checks passed;
whether the final's lead over the best trivial baseline and over the single agent is beyond the
test set's noise, whether it beats the hand-written baseline (a paired bootstrap over the held-out rows,
engine/official_gap.py: better, noise, WORSE, or the same predictions); and the hindsight's rank
correlations (validation and J against the official metric over every probed candidate). All
offline, all real execution.

    python benchmarks/generalization.py [--iterations 2] [--seed 1] [--searches mimosa scimars tree]
                                        [--tasks pendulum-extrapolation wine-cultivar] [--keep DIR]
"""
from __future__ import annotations

import argparse
import io
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from engine.evolve import evolve  # noqa: E402
from engine.run_spec import RunSpec  # noqa: E402
from engine.search.registry import SEARCHES  # noqa: E402
from engine.task import load_task  # noqa: E402

PLAUSIBILITY = ("finite", "within_range", "beats_trivial", "claims_match")


def _fmt(metric: dict | None) -> str:
    return f"{metric['value']:.4g}" if metric and metric.get("ok") else "fail"


def _plausible(end: dict) -> str:
    """'ok' when every plausibility check the final workflow (or champion) ran passed, else the
    failed names; the rejected candidates' checks are not the final's."""
    ran = [c for c in end.get("checks") or [] if c["name"] in PLAUSIBILITY]
    failed = [c["name"] for c in ran if not c["passed"]]
    return "ok" if ran and not failed else ("-" if not ran else "FAIL " + ",".join(failed))


def _versus(result, name: str) -> str:
    """The final team against one baseline: its lead's verdict over the test set's noise."""
    gap = (result.gaps or {}).get(name) or {}
    return {"better": "better", "worse": "WORSE", "within noise": "noise", "identical": "same"}.get(
        gap.get("verdict"), "n/a")


def _best_validated(result, hib: bool) -> str:
    """The official score of the probed candidate with the best validation: what a search that
    ships its best validation score, with no noise rule, would have shipped."""
    rows = [c for c in (result.hindsight or {}).get("candidates", []) if c.get("validation") is not None]
    if not rows:
        return "-"
    best = max(rows, key=lambda c: c["validation"]) if hib else min(rows, key=lambda c: c["validation"])
    return "fail" if best.get("official") is None else f"{best['official']:.4g}"


def _rho(result, a: str, b: str) -> str:
    c = next((c for c in (result.hindsight or {}).get("correlations", []) if (c["a"], c["b"]) == (a, b)), None)
    return "n/a" if not c or c.get("rho") is None else f"{c['rho']:+.2f}"


def _hand_written(task, tmp: Path) -> dict | None:
    """The official score of the example's own hand-written baseline (reference_baseline.py, for
    people: never among the files agents see), run on a copy of the task's inputs."""
    script = task.folder / "reference_baseline.py"
    if not script.is_file():
        return None
    work = Path(tempfile.mkdtemp(dir=tmp, prefix="hand-"))
    for rel, path in task.input_files().items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, work / rel)
    done = subprocess.run([sys.executable, str(script)], cwd=work, capture_output=True, text=True, timeout=600)
    answer = work / task.resources.predictions_file
    if done.returncode != 0 or not answer.is_file():
        return {"ok": False, "error": done.stderr[-300:]}
    return task.assessment().official(answer.read_bytes())


def _best_trivial(base: dict, hib: bool) -> tuple[str, dict | None]:
    """The best trivial baseline's name and official score (whichever the task's answer kind has)."""
    trivial = {n: m for n, m in base.items() if n != "single_agent" and m and m.get("ok")}
    if not trivial:
        return "-", None
    name = (max if hib else min)(trivial, key=lambda n: trivial[n]["value"])
    return name, trivial[name]


def _versus_trivial(result, name: str, final: dict, trivial: dict | None, hib: bool) -> str:
    """The lead's verdict over the test set's noise; where the answer has no rows to resample (a
    table of parameters), the official values compared, marked '*'."""
    verdict = _versus(result, name) if trivial else "n/a"
    return verdict if verdict != "n/a" or not trivial else _lead(final, trivial, hib) + "*"


def _lead(final: dict, other: dict | None, hib: bool) -> str:
    if not (final.get("ok") and other and other.get("ok")):
        return "n/a"
    return "better" if (final["value"] > other["value"] if hib else final["value"] < other["value"]) else "WORSE"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--searches", nargs="+", default=list(SEARCHES))
    parser.add_argument("--tasks", nargs="+", default=sorted(p.name for p in (ROOT / "examples").iterdir()
                                                            if (p / "Problem.md").exists()))
    parser.add_argument("--keep", type=Path, default=None,
                        help="write the runs under this folder and keep them (default: a temporary one)")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    header = (f"{'task':<24} {'metric':<19} {'trivial (best)':>24} {'hand':>9} {'single':>9} {'search':<8} "
              f"{'initial':>9} {'final':>9} {'best val':>9} {'plaus.':>7} {'vs trivial':>10} {'vs hand':>7} "
              f"{'vs single':>9} {'ρ val~off':>9} {'ρ J~off':>8}")
    print(header)
    print("-" * len(header))
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.keep or scratch
        Path(tmp).mkdir(parents=True, exist_ok=True)
        for name in args.tasks:
            task = load_task(ROOT / "examples" / name)
            hib = task.metric.higher_is_better
            hand = _hand_written(task, Path(tmp))
            for search in args.searches:
                # the single agent runs beside every search: the same seed gives the same run, and
                # each search's lead over it needs its predictions
                result = evolve(task.folder,
                                RunSpec(search=search, iterations=args.iterations, seed=args.seed, single_agent=True),
                                runs_dir=Path(tmp) / "runs", out=io.StringIO())
                base = result.baselines
                final = result.final.get("official") or {}
                trivial_name, trivial = _best_trivial(base, hib)
                print(f"{name:<24} {task.metric.name:<19} {trivial_name + ' ' + _fmt(trivial):>24} "
                      f"{_fmt(hand) if hand else '-':>9} {_fmt(base.get('single_agent')):>9} {search:<8} "
                      f"{_fmt(result.initial.get('official')):>9} {_fmt(final):>9} {_best_validated(result, hib):>9} "
                      f"{_plausible(result.final):>7} {_versus_trivial(result, trivial_name, final, trivial, hib):>10} "
                      f"{_lead(final, hand, hib) if hand else '-':>7} {_versus(result, 'single_agent'):>9} "
                      f"{_rho(result, 'validation', 'official'):>9} {_rho(result, 'J', 'official'):>8}", flush=True)
    print("\n* no interval (the answer has no held-out rows to resample): the official values compared")


if __name__ == "__main__":
    main()
