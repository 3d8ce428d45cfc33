"""The burgers-field example (answer kind 'field'): the held-out field is a solution of the law
pde.py states (the viscous Burgers equation: a small finite-difference residual, the initial and
boundary conditions, the method of lines on pde.py itself agreeing with it), pde.py's functions
are the stated equation, evaluate.py ranks the shipped reference baseline well ahead of the two
trivial answers (the initial condition held, zero) and refuses malformed predictions with the
reason, and make_data.py reproduces the committed files."""
from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.example_files import assert_make_data_reproduces

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "examples" / "burgers-field"
NU = 0.02
N_X, N_T = 81, 41


def load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def law():
    return load("burgers_field_pde", TASK / "pde.py")


def make_data():
    return load("burgers_field_make_data", TASK / "make_data.py")


def evaluate(*args) -> subprocess.CompletedProcess:
    """The real command, as the engine runs it."""
    return subprocess.run([sys.executable, str(TASK / "evaluate.py"), *map(str, args)],
                          capture_output=True, text=True, timeout=60, cwd=TASK)


def score(*args) -> dict:
    proc = evaluate(*args)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().split("\n")
    assert len(lines) == 1, proc.stdout
    result = json.loads(lines[0])
    assert set(result) == {"metric", "value", "higher_is_better", "n"}
    assert (result["metric"], result["higher_is_better"]) == ("relative_l2", False)
    return result


def query() -> pd.DataFrame:
    return pd.read_csv(TASK / "data" / "query_points.csv")


def truth() -> pd.DataFrame:
    return pd.read_csv(TASK / "heldout" / "test_targets.csv")


def grid() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(xs, ts, U) with U[i, j] = u_true(xs[j], ts[i]), from the t-major ids."""
    q, u = query(), truth()
    xs, ts = np.unique(q["x"]), np.unique(q["t"])
    return xs, ts, u["u"].to_numpy().reshape(len(ts), len(xs))


def write(path: Path, values, ids=None) -> Path:
    pd.DataFrame({"id": query()["id"] if ids is None else ids, "u": values}).to_csv(path, index=False)
    return path


# --- the files ------------------------------------------------------------------------------------

def test_the_query_is_the_full_grid_in_t_major_order_and_the_truth_covers_it():
    q, u = query(), truth()
    assert list(q.columns) == ["id", "x", "t"] and list(u.columns) == ["id", "u"]
    assert len(q) == N_X * N_T == 3321
    assert q["id"].tolist() == u["id"].tolist() == list(range(len(q)))
    xs, ts = np.linspace(-1.0, 1.0, N_X), np.linspace(0.0, 1.0, N_T)
    np.testing.assert_allclose(q["x"].to_numpy(), np.tile(xs, N_T), atol=1e-12)    # x varies fastest
    np.testing.assert_allclose(q["t"].to_numpy(), np.repeat(ts, N_X), atol=1e-12)
    assert not q.duplicated(["x", "t"]).any()
    assert np.isfinite(u["u"]).all() and u["u"].abs().max() <= 1.0 + 1e-12


def test_the_observations_are_forty_noisy_early_interior_measurements():
    obs = pd.read_csv(TASK / "data" / "observations.csv")
    assert list(obs.columns) == ["x", "t", "u"] and len(obs) == 40
    assert obs["x"].between(-1.0, 1.0, inclusive="neither").all()
    assert (obs["t"] > 0).all() and (obs["t"] <= 0.3).all()
    assert (obs["x"] < 0).sum() >= 10 and (obs["x"] > 0).sum() >= 10  # both sides of the front
    noise = obs["u"].to_numpy() - make_data().exact(obs["x"].to_numpy(), obs["t"].to_numpy())
    assert abs(noise.mean()) < 0.005 and 0.006 < noise.std() < 0.015  # the documented sd 0.01


def test_data_config_is_the_field_contract_and_ships_no_baseline():
    config = json.loads((TASK / "Data_config.json").read_text())
    assert config["files"] == {"query": "data/query_points.csv", "observations": "data/observations.csv",
                               "law": "pde.py"}
    assert config["answer"] == {"kind": "field", "query": "query", "observations": "observations", "law": "law"}
    assert (config["target"], config["id_column"], config["kind"]) == ("u", "id", "regression")
    assert config["predictions"] == {"file": "predictions.csv", "columns": {"id": "int", "u": "float"}}
    assert config["limits"] == {"wall_seconds": 300, "cpu_seconds": 300, "memory_mb": 2048}
    shipped = " ".join(config["files"].values())
    assert "reference_baseline" not in shipped and "heldout" not in shipped and "make_data" not in shipped
    for name in ("Problem.md", "Requirements.md", "Evaluation.md", "README.md", "reference_baseline.py"):
        assert (TASK / name).is_file(), name
    evaluation = (TASK / "Evaluation.md").read_text()
    assert "name: relative_l2" in evaluation and "direction: lower is better" in evaluation
    assert "--truth truth.csv" in evaluation


# --- the law ---------------------------------------------------------------------------------------

def test_pde_py_states_the_viscous_burgers_equation():
    pde = law()
    assert (pde.SPACE, pde.TIME, pde.DOMAIN, pde.T0, pde.KNOWN) == ("x", "t", (-1.0, 1.0), 0.0, {"nu": NU})
    rng = np.random.default_rng(0)
    x, u, u_x, u_xx = (rng.normal(size=50) for _ in range(4))
    t = rng.uniform(0, 1, 50)
    np.testing.assert_allclose(pde.rhs(t, x, u, u_x, u_xx, **pde.KNOWN), -u * u_x + NU * u_xx, rtol=1e-14)
    np.testing.assert_allclose(pde.rhs(t, x, u, u_x, u_xx, nu=0.1), -u * u_x + 0.1 * u_xx, rtol=1e-14)
    xs = np.linspace(-1, 1, 101)
    np.testing.assert_allclose(pde.initial(xs, **pde.KNOWN), -np.sin(np.pi * xs), atol=1e-15)
    for when in (0.0, 0.3, 1.0):
        assert tuple(float(v) for v in pde.boundary(when, **pde.KNOWN)) == (0.0, 0.0)


def test_the_engine_reads_the_law_file_without_complaint():
    field = pytest.importorskip("engine.assessment.field")
    assert field.law_problems(TASK / "pde.py") == []
    assert field.law_coordinates(TASK / "pde.py") == ("x", "t")


# --- the held-out field solves the law ---------------------------------------------------------------

def residual(U: np.ndarray, xs: np.ndarray, ts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """u_t - rhs on the interior of a (times, positions) grid, second-order central differences
    (three-point u_x and u_xx); and u_t there."""
    pde, h = law(), xs[1] - xs[0]
    u_t = np.gradient(U, ts, axis=0)[1:-1, 1:-1]
    u = U[1:-1, 1:-1]
    u_x = (U[1:-1, 2:] - U[1:-1, :-2]) / (2 * h)
    u_xx = (U[1:-1, 2:] - 2 * u + U[1:-1, :-2]) / h ** 2
    return u_t - pde.rhs(ts[1:-1, None], xs[None, 1:-1], u, u_x, u_xx, **pde.KNOWN), u_t


def rms(a) -> float:
    return float(np.sqrt(np.mean(np.square(a))))


def test_the_reference_field_satisfies_the_pde_on_the_query_grid():
    xs, ts, U = grid()
    r, u_t = residual(U, xs, ts)
    interior_t, interior_x = ts[1:-1], xs[1:-1]
    # Where the grid resolves the flow (before the front steepens, or away from it) the residual is
    # a fraction of a percent of u_t.
    early = interior_t <= 0.25
    assert rms(r[early]) < 0.02 * rms(u_t[early])
    away = np.abs(interior_x) >= 0.25
    assert rms(r[:, away]) < 0.01 * rms(u_t[:, away])
    # Over the whole grid the front (about two query spacings wide) dominates: still small against
    # u_t, and tiny against what the equation says of a field that does not move (initial held).
    assert rms(r) < 0.2 * rms(u_t)
    held, _ = residual(np.tile(U[0], (len(ts), 1)), xs, ts)
    assert rms(r) < 0.1 * rms(held)


def test_the_residual_at_the_front_is_discretisation_error():
    """The same field on grids twice and four times finer (make_data's exact solution): the residual
    falls about fourfold per halving, as the truncation error of second-order differences does."""
    exact = make_data().exact
    values = []
    for refine in (1, 2, 4):
        xs, ts = np.linspace(-1, 1, 80 * refine + 1), np.linspace(0, 1, 40 * refine + 1)
        t, x = np.meshgrid(ts, xs, indexing="ij")
        values.append(rms(residual(exact(x, t), xs, ts)[0]))
    xs, ts, U = grid()
    assert values[0] == pytest.approx(rms(residual(U, xs, ts)[0]), rel=1e-3)  # the committed field
    assert 3.5 < values[0] / values[1] < 4.5 and 3.5 < values[1] / values[2] < 4.5, values


def test_the_reference_field_meets_the_initial_and_boundary_conditions_and_is_odd():
    xs, ts, U = grid()
    pde = law()
    np.testing.assert_allclose(U[0], pde.initial(xs, **pde.KNOWN), atol=1e-10)
    assert np.all(U[:, 0] == 0.0) and np.all(U[:, -1] == 0.0)
    np.testing.assert_allclose(U, -U[:, ::-1], atol=1e-9)  # u(-x, t) = -u(x, t): the flow is odd
    # the sine's slope (pi at most) steepens into a front at x = 0, near 18 per unit x at its steepest
    slope = np.abs(np.diff(U, axis=1)).max(axis=1) / (xs[1] - xs[0])
    assert slope[0] < np.pi and slope.max() > 15.0
    assert np.abs(xs[np.argmax(np.abs(np.diff(U[-1])))] + 0.0125) < 0.02  # the front sits at x = 0


def test_the_method_of_lines_on_pde_py_agrees_with_the_reference_field():
    """An independent solver, running the law file itself, reproduces the held-out field."""
    x, ts, U = make_data().method_of_lines(2001)
    xs, query_ts, truth_grid = grid()
    np.testing.assert_allclose(ts, query_ts, atol=1e-12)
    columns = np.round((xs - x[0]) / (x[1] - x[0])).astype(int)
    np.testing.assert_allclose(x[columns], xs, atol=1e-12)
    diff = U[:, columns] - truth_grid
    assert np.linalg.norm(diff) / np.linalg.norm(truth_grid) < 5e-5 and np.abs(diff).max() < 2e-4


# --- evaluate.py -------------------------------------------------------------------------------------

def test_the_reference_baseline_beats_the_initial_held_and_zero(tmp_path):
    (tmp_path / "data").symlink_to(TASK / "data")
    proc = subprocess.run([sys.executable, str(TASK / "reference_baseline.py")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    reference = score(tmp_path / "predictions.csv")
    assert reference["n"] == N_X * N_T

    q = query()
    initial_held = score(write(tmp_path / "held.csv", -np.sin(np.pi * q["x"].to_numpy())))["value"]
    zero = score(write(tmp_path / "zero.csv", np.zeros(len(q))))["value"]
    assert zero == 1.0
    # the numbers README.md reports, and a clear margin between them
    assert initial_held == pytest.approx(0.5706, abs=5e-4)
    assert reference["value"] == pytest.approx(0.0935, abs=5e-4)
    assert reference["value"] < 0.2 * min(initial_held, zero)


def test_the_engines_trivial_answers_score_as_readme_says(tmp_path):
    """The trivial baselines as the engine writes them (the law's initial condition held, zero)."""
    pytest.importorskip("engine.assessment.field")
    from engine.task import load_task

    answers = load_task(TASK).assessment().trivial_predictions()
    assert set(answers) == {"initial_held", "zero"}
    for name, expected in (("initial_held", 0.5706), ("zero", 1.0)):
        (tmp_path / f"{name}.csv").write_bytes(answers[name])
        assert score(tmp_path / f"{name}.csv")["value"] == pytest.approx(expected, abs=5e-4), name


def test_perfect_predictions_score_zero_in_any_row_order(tmp_path):
    truth().sample(frac=1.0, random_state=1).to_csv(tmp_path / "p.csv", index=False)
    assert score(tmp_path / "p.csv") == {"metric": "relative_l2", "value": 0.0, "higher_is_better": False,
                                         "n": 3321}


def test_the_score_is_the_relative_l2_error(tmp_path):
    u = truth()["u"].to_numpy()
    rng = np.random.default_rng(3)
    pred = 1.05 * u + 0.01 * rng.standard_normal(len(u))
    expected = np.linalg.norm(pred - u) / np.linalg.norm(u)
    assert score(write(tmp_path / "p.csv", pred))["value"] == pytest.approx(expected, rel=1e-9)


def test_a_truth_file_scores_only_its_points(tmp_path):
    t = truth()
    part = t[t["id"] % 7 == 0].copy()
    part.to_csv(tmp_path / "truth.csv", index=False)
    pred = part["u"].to_numpy() + 0.1
    write(tmp_path / "p.csv", pred, ids=part["id"])
    result = score(tmp_path / "p.csv", "--truth", tmp_path / "truth.csv")
    assert result["n"] == len(part)
    expected = 0.1 * math.sqrt(len(part)) / np.linalg.norm(part["u"])
    assert result["value"] == pytest.approx(expected, rel=1e-9)
    # the full predictions hold ids the truth does not: refused
    proc = evaluate(TASK / "heldout" / "test_targets.csv", "--truth", tmp_path / "truth.csv")
    assert proc.returncode == 2 and proc.stdout == "" and "unexpected ids" in proc.stderr


def test_a_truth_file_without_u_or_with_only_zeros_is_refused(tmp_path):
    t = truth()
    t.rename(columns={"u": "v"}).to_csv(tmp_path / "renamed.csv", index=False)
    t.assign(u=0.0).to_csv(tmp_path / "zeros.csv", index=False)
    write(tmp_path / "p.csv", t["u"])
    for bad, said in (("renamed.csv", "lacks column"), ("zeros.csv", "undefined")):
        proc = evaluate(tmp_path / "p.csv", "--truth", tmp_path / bad)
        assert proc.returncode == 2 and proc.stdout == "" and said in proc.stderr, proc.stderr


def _with_value(value):
    def corrupt(df):
        out = df.astype({"u": object})
        out.loc[3, "u"] = value
        return out
    return corrupt


MALFORMED = {
    "missing_row": (lambda df: df.iloc[1:], "missing ids"),
    "extra_id": (lambda df: pd.concat([df, df.iloc[:1].assign(id=99999)]), "unexpected ids"),
    "duplicate_id": (lambda df: df.assign(id=[0, *df["id"].iloc[:-1]]), "duplicate ids"),
    "duplicate_row": (lambda df: pd.concat([df, df.iloc[:1]]), "duplicate ids"),
    "fractional_id": (lambda df: df.assign(id=df["id"] + 0.5), "integer ids"),
    "nan": (_with_value(float("nan")), "NaN or inf"),
    "inf": (_with_value(float("inf")), "NaN or inf"),
    "text": (_with_value("fast"), "non-numeric"),
    "no_u_column": (lambda df: df.rename(columns={"u": "velocity"}), "missing column"),
    "no_id_column": (lambda df: df[["u"]], "missing column"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_predictions_are_rejected_with_the_reason(case, tmp_path):
    corrupt, message = MALFORMED[case]
    corrupt(truth()).to_csv(tmp_path / "predictions.csv", index=False)
    proc = evaluate(tmp_path / "predictions.csv")
    assert proc.returncode == 2 and proc.stdout == ""
    assert message in proc.stderr, proc.stderr


def test_a_missing_or_empty_file_and_bad_arguments_are_refused(tmp_path):
    proc = evaluate(tmp_path / "absent.csv")
    assert proc.returncode == 2 and proc.stdout == "" and "not found" in proc.stderr
    (tmp_path / "empty.csv").write_text("")
    proc = evaluate(tmp_path / "empty.csv")
    assert proc.returncode == 2 and proc.stdout == "" and "could not parse" in proc.stderr
    proc = evaluate()
    assert proc.returncode == 2 and proc.stdout == ""


# --- provenance ----------------------------------------------------------------------------------------

def test_make_data_reproduces_the_committed_files(tmp_path):
    assert_make_data_reproduces(TASK, ("data/query_points.csv", "data/observations.csv", "heldout/test_targets.csv"),
                                tmp_path)
