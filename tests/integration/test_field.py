"""A field on a grid with no training rows (issue 27 item 2c), on a task generated here and never
tuned to: heat in a rod with a decaying source, stated as code. Trellis validates answers by the
residual of the stated equation (and held-out observations); the offline scientist solves the
equation by the method of lines; the run is scored officially like any per-row answer."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.assessment import assessment_for
from engine.errors import TaskSpecError
from engine.preflight import PreflightError, preflight
from engine.sandbox.subprocess_executor import SubprocessExecutor
from engine.task import load_task

ROOT = Path(__file__).resolve().parents[2]
ALPHA = 0.05

LAW = '''
import numpy as np

SPACE = "pos"
TIME = "time"
DOMAIN = (0.0, 2.0)
T0 = 0.0
KNOWN = {"alpha": 0.05}


def initial(x, alpha):
    return np.sin(np.pi * x / 2) + 0.5 * np.sin(3 * np.pi * x / 2)


def boundary(t, alpha):
    return (0.0, 0.0)


def rhs(t, x, u, u_x, u_xx, alpha):
    return alpha * u_xx
'''

EVALUATE = '''
import argparse, json, sys
from pathlib import Path
import numpy as np, pandas as pd
p = argparse.ArgumentParser(); p.add_argument("predictions")
p.add_argument("--truth", default=str(Path(__file__).parent / "heldout" / "field.csv"))
a = p.parse_args()
t, q = pd.read_csv(a.truth), pd.read_csv(a.predictions)
m = t.merge(q, on="id", suffixes=("", "_p"))
if len(m) != len(t) or not np.isfinite(m["temp_p"]).all():
    print("ids or values do not match", file=sys.stderr); sys.exit(2)
v = float(np.linalg.norm(m["temp"] - m["temp_p"]) / np.linalg.norm(m["temp"]))
print(json.dumps({"metric": "relative_l2", "value": v, "higher_is_better": False, "n": len(m)}))
'''


def exact(x, t):
    k1, k3 = (np.pi / 2) ** 2, (3 * np.pi / 2) ** 2
    return np.exp(-ALPHA * k1 * t) * np.sin(np.pi * x / 2) + 0.5 * np.exp(-ALPHA * k3 * t) * np.sin(3 * np.pi * x / 2)


def _csv(path: Path, header, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join([",".join(header), *(",".join(str(v) for v in r) for r in rows)]) + "\n")


def heat_task(root: Path, observations: int = 12) -> Path:
    d = root / "rod-heat"
    xs, ts = np.linspace(0, 2, 33), np.linspace(0, 4, 21)
    points = [(k, x, t) for k, (t, x) in enumerate((t, x) for t in ts for x in xs)]
    _csv(d / "data" / "points.csv", ["id", "pos", "time"], [[k, round(x, 6), round(t, 6)] for k, x, t in points])
    _csv(d / "heldout" / "field.csv", ["id", "temp"], [[k, repr(float(exact(x, t)))] for k, x, t in points])
    rng = np.random.default_rng(2)
    ox, ot = rng.uniform(0.1, 1.9, observations), rng.uniform(0, 1, observations)
    _csv(d / "data" / "probes.csv", ["pos", "time", "temp"],
         [[round(a, 4), round(b, 4), round(float(exact(a, b)) + rng.normal(0, 0.005), 5)] for a, b in zip(ox, ot)])
    (d / "law.py").write_text(LAW)
    (d / "Problem.md").write_text("# Heat in a rod\n\n## Goal\nThe temperature along the rod over time.\n\n"
                                  "## Context\nThe heat equation, stated in law.py.\n")
    (d / "Requirements.md").write_text("# Requirements\n\n- CPU only\n")
    (d / "Evaluation.md").write_text("# Evaluation\n\n## Metric\nname: relative_l2\ndirection: lower is better\n")
    (d / "evaluate.py").write_text(EVALUATE)
    (d / "Data_config.json").write_text(json.dumps({
        "files": {"query": "data/points.csv", "observations": "data/probes.csv", "law": "law.py"},
        "target": "temp", "id_column": "id", "kind": "regression",
        "answer": {"kind": "field", "query": "query", "observations": "observations", "law": "law"},
        "predictions": {"file": "predictions.csv", "columns": {"id": "int", "temp": "float"}}}))
    return d


ANSWER = """import numpy as np, pandas as pd
q = pd.read_csv("data/points.csv")
x, t = q["pos"].to_numpy(), q["time"].to_numpy()
k1, k3 = (np.pi / 2) ** 2, (3 * np.pi / 2) ** 2
u = np.exp(-0.05 * k1 * t) * np.sin(np.pi * x / 2) + 0.5 * np.exp(-0.05 * k3 * t) * np.sin(3 * np.pi * x / 2)
pd.DataFrame({"id": q["id"], "temp": SCALE * u}).to_csv("predictions.csv", index=False)
"""


def test_the_exact_field_validates_far_better_than_a_wrong_one_and_the_trivial_answers(tmp_path):
    task = load_task(heat_task(tmp_path))
    assessment = assessment_for(task)
    assert assessment.name == "field" and "answer: the field `temp`" in task.description()
    plan = assessment.plan()
    assert plan.split == "residual" and plan.folds == 5
    good, _ = assessment.validate(ANSWER.replace("SCALE", "1.0"), SubprocessExecutor())
    good_parts = assessment.parts
    bad, _ = assessment.validate(ANSWER.replace("SCALE", "1.3"), SubprocessExecutor())
    bad_parts = assessment.parts
    from engine.protocol.events import Evaluation
    Evaluation(**good)  # what a search traces: the validation fits the event's schema
    assert good["ok"] and bad["ok"], (good, bad)
    assert good["metric"] == "law_residual" and len(good["split_values"]) == 5
    assert good["value"] < 0.5 * bad["value"]  # a 30 % wrong field breaks its initial, boundary-free, observed terms
    assert set(good["baselines"]) == {"initial_held", "zero"}
    assert good["value"] < 0.2 * min(good["baselines"].values())
    assert good_parts["observations"] < 0.02 and bad_parts["initial"] > 0.1
    assert "the stated law (residual" in good["scorer"]


def test_preflight_checks_a_fields_own_files(tmp_path):
    folder = heat_task(tmp_path)
    facts = preflight(load_task(folder))
    assert facts.n_train == 0 and facts.n_test == 33 * 21 and facts.evaluate_metric == "relative_l2"
    rows = (folder / "data" / "points.csv").read_text().splitlines()
    (folder / "data" / "points.csv").write_text("\n".join(rows[:-5]) + "\n")  # no longer a full grid
    (folder / "law.py").write_text(LAW.replace("def boundary", "def edges"))
    with pytest.raises(PreflightError) as err:
        preflight(load_task(folder))
    said = " ".join(err.value.problems)
    assert "not a full grid" in said and "lacks def boundary" in said


def test_a_field_answer_names_its_files(tmp_path):
    folder = heat_task(tmp_path)
    config = json.loads((folder / "Data_config.json").read_text())
    config["answer"]["law"] = "physics"
    (folder / "Data_config.json").write_text(json.dumps(config))
    with pytest.raises(TaskSpecError, match="answer.law must name a role of 'files'"):
        load_task(folder)


@pytest.mark.slow
def test_the_offline_scientist_solves_the_stated_equation_end_to_end(tmp_path):
    task = heat_task(tmp_path)
    done = subprocess.run([sys.executable, "-m", "engine", "run", str(task), "--no-single-agent",
                           "--runs-dir", str(tmp_path / "runs"), "--executor", "subprocess"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "TRELLIS_MCP_CONFIG": "none"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    summary = json.loads(next((tmp_path / "runs").glob("*/summary.json")).read_text())
    assert summary["official"]["value"] < 0.01  # the method of lines against the exact solution
    assert "beats every baseline" in done.stdout and "initial held" in done.stdout


def test_query_positions_a_last_bit_off_the_solver_grid_do_not_stall_the_solver(tmp_path):
    """-0.65 read from a CSV and the linspace's -0.6499999999999999 once sat side by side in the
    method of lines' grid: spacings of 1e-17 made the system so stiff a run timed out."""
    from engine.offline.pde import PDE_SOLVERS
    from engine.offline.strategy import spec_of_task

    folder = heat_task(tmp_path)
    points = (folder / "data" / "points.csv").read_text().splitlines()
    # positions as a person types them (0.0625 * k), one of them a last bit off the linspace's value
    shifted = [points[0]] + [",".join([p.split(",")[0], repr(float(p.split(",")[1]) + 1e-16), p.split(",")[2]])
                             for p in points[1:]]
    (folder / "data" / "points.csv").write_text("\n".join(shifted) + "\n")
    task = load_task(folder)
    code = PDE_SOLVERS[0].render({"points": 401, "method": "BDF"}, spec_of_task(task), 0)
    result = SubprocessExecutor().run(__import__("engine.sandbox", fromlist=["ExecutionRequest"]).ExecutionRequest(
        code=code, input_files=task.input_files(), limits=task.resources.limits))
    assert result.ok, result.stderr_tail if hasattr(result, "stderr_tail") else result
    assert result.duration_s < 30
