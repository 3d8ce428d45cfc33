"""Answers that run cleanly but cannot be true: absurd predictions with a boastful validation
line, and a final report that states a score nobody measured. Both are caught through the real
verifier and finalizer (offline models, fake executor), and the run does not end "completed"."""
import csv
import io
import json
import textwrap

import numpy as np
import pandas as pd
import pytest

from engine.llm import get_litellm
from engine.runner import RunConfig, run_workflow
from engine.synthesis import team_workflow
from engine.task import load_task
from engine.trace import ListSink
from tests.fakes import FakeExecutor

EVALUATE = textwrap.dedent('''\
    import json, sys
    import pandas as pd
    pred = pd.read_csv(sys.argv[1]).set_index("id")["period"]
    truth = pd.read_csv("heldout/truth.csv").set_index("id")["period"]
    pred = pred.reindex(truth.index)
    r2 = 1 - ((truth - pred) ** 2).sum() / ((truth - truth.mean()) ** 2).sum()
    print(json.dumps({"metric": "r2", "value": float(r2), "higher_is_better": True, "n": len(truth)}))
''')


@pytest.fixture
def pendulum(tmp_path):
    """Period of a pendulum, T = 2 pi sqrt(L / g), measured on L in [0.2, 1.6], scored on [1.6, 2]."""
    folder = tmp_path / "pendulum"
    (folder / "data").mkdir(parents=True)
    (folder / "heldout").mkdir()
    rng = np.random.default_rng(1)
    length = rng.uniform(0.2, 1.6, 120)
    period = 2 * np.pi * np.sqrt(length / 9.81) * (1 + rng.normal(0, 0.01, 120))
    pd.DataFrame({"length": length, "period": period}).to_csv(folder / "data" / "train.csv", index=False)
    test_length = np.linspace(1.6, 2.0, 30)
    pd.DataFrame({"id": range(30), "length": test_length}).to_csv(folder / "data" / "test_features.csv", index=False)
    pd.DataFrame({"id": range(30), "period": 2 * np.pi * np.sqrt(test_length / 9.81)}).to_csv(
        folder / "heldout" / "truth.csv", index=False)
    (folder / "Problem.md").write_text("# Pendulum period\n\n## Goal\nPredict the period from the length.\n")
    (folder / "Requirements.md").write_text("- write predictions.csv with id and period\n")
    (folder / "Evaluation.md").write_text("# Evaluation\n\n## Metric\nname: r2\ndirection: higher is better\n")
    (folder / "evaluate.py").write_text(EVALUATE)
    (folder / "Data_config.json").write_text(json.dumps({
        "files": {"train": "data/train.csv", "test_features": "data/test_features.csv"},
        "target": "period", "id_column": "id", "features": ["length"],
        "predictions": {"file": "predictions.csv", "columns": {"id": "int", "period": "float"}}}))
    return load_task(folder)


class BoastfulExecutor(FakeExecutor):
    """Every training program writes predictions ``factor`` times the fake's honest line and
    prints a validation score of its choosing."""

    def __init__(self, root, factor: float, claimed_r2: float):
        super().__init__(root)
        self.factor, self.claimed_r2 = factor, claimed_r2

    def _predictions(self, code, train, test):
        text, summary = super()._predictions(code, train, test)
        rows = list(csv.DictReader(io.StringIO(text)))
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({**row, "period": repr(float(row["period"]) * self.factor)})
        return out.getvalue(), summary + f"validation_r2: {self.claimed_r2:.6f}\n"


def _run(task, tmp_path, executor, model=None, **config):
    sink = ListSink()
    result = run_workflow(task, team_workflow(task), RunConfig(run_dir=tmp_path / "run", seed=1, model_override=model,
                                                               **config),
                          executor=executor, sinks=[sink])
    return result, sink.events


def _checks(events, name):
    return [e for e in events if e.kind == "check" and e.payload["name"] == name]


def test_predictions_4000x_too_large_with_a_great_claimed_score_do_not_ship(pendulum, tmp_path):
    executor = BoastfulExecutor(tmp_path / "sandbox", factor=4000.0, claimed_r2=0.99)
    result, events = _run(pendulum, tmp_path, executor)

    ranges = _checks(events, "within_range")
    assert ranges and all(not e.payload["passed"] and e.agent == "verifier" for e in ranges)
    assert "above" in ranges[0].payload["detail"]
    # the verifier's model saw the failed check, and the step did not pass on any attempt
    verifier_ends = [e.payload for e in events if e.kind == "agent_finished" and e.agent == "verifier"]
    assert verifier_ends and all(p["status"] != "SUCCESS" for p in verifier_ends)
    assert "within_range" in verifier_ends[-1]["message"]
    # the debugger was handed the failed check to repair
    debugger_prompts = [json.dumps(e.payload["messages"]) for e in events
                        if e.kind == "model_call" and e.payload["role"] == "debugger"]
    assert debugger_prompts and "within_range" in debugger_prompts[0]

    assert result.status == "failed", result.reason
    assert result.agent_status["verifier"] == "FAILURE" and result.agent_status["finalizer"] == "SKIPPED"
    assert result.predictions_sha256 is None  # nothing was shipped, nothing was scored
    assert not (result.metric or {}).get("ok")


def test_a_printed_score_is_no_evidence_against_the_trivial_baselines(pendulum, tmp_path):
    """Issue 27 item 5c: beats_trivial read the score a program printed, so an honest program
    printing r2 = -968 failed it and one printing 0.99 passed it whatever it predicted. It is
    Trellis's validation on its own folds against the baselines on the same folds: the printed
    number changes nothing either way."""
    verdicts = {}
    for claimed in (-968.0, 0.99):
        result, events = _run(pendulum, tmp_path / str(claimed), BoastfulExecutor(
            tmp_path / f"sandbox{claimed}", factor=1.0, claimed_r2=claimed), scoring="validation")
        trivial = _checks(events, "beats_trivial")
        assert len(trivial) == 1 and trivial[0].agent != "verifier"  # once, after Trellis validated it
        assert str(claimed) not in trivial[0].payload["detail"] and "same folds" in trivial[0].payload["detail"]
        verdicts[claimed] = (trivial[0].payload["passed"], result.metric["value"])
    assert verdicts[-968.0] == verdicts[0.99]
    # predictions 30 % too large are worse than the training mean there, whatever they claim
    result, events = _run(pendulum, tmp_path / "big", BoastfulExecutor(tmp_path / "sandbox-big", factor=1.3,
                                                                       claimed_r2=0.99), scoring="validation")
    (trivial,) = _checks(events, "beats_trivial")
    assert not trivial.payload["passed"] and "worse than the" in trivial.payload["detail"]
    assert "checks failed: beats_trivial" in result.reason


def test_the_same_program_honest_in_range_completes(pendulum, tmp_path):
    executor = BoastfulExecutor(tmp_path / "sandbox", factor=1.0, claimed_r2=0.9)
    result, events = _run(pendulum, tmp_path, executor)
    assert result.status == "completed", result.reason
    for name in ("finite", "within_range", "claims_match"):
        found = _checks(events, name)
        assert found and all(e.payload["passed"] for e in found), name


@pytest.fixture
def fabricating_model():
    """The offline scientist, except that its final report claims R² = 0.95 whatever was measured."""
    from litellm import CustomLLM
    from litellm.types.utils import ModelResponse

    from engine.offline.scientist import respond

    class Fabricator(CustomLLM):
        def completion(self, model, messages, *a, **k):
            text = respond(messages, seed=0)
            if "You are the finalizer" in messages[0]["content"]:
                text += "\n\n**Headline.** The model reaches validation R² = 0.95."
            return ModelResponse(model=model, choices=[{"index": 0, "message": {"role": "assistant", "content": text}}])

    litellm = get_litellm()
    litellm.custom_provider_map = [*litellm.custom_provider_map, {"provider": "fabricator", "custom_handler": Fabricator()}]
    yield "fabricator/model"
    litellm.custom_provider_map = [p for p in litellm.custom_provider_map if p["provider"] != "fabricator"]


def test_a_final_report_claiming_a_score_nobody_measured_fails_the_run(pendulum, tmp_path, fabricating_model):
    executor = BoastfulExecutor(tmp_path / "sandbox", factor=1.0, claimed_r2=0.41)
    result, events = _run(pendulum, tmp_path, executor, model=fabricating_model)
    claims = _checks(events, "claims_match")
    assert claims and all(not e.payload["passed"] and e.agent == "finalizer" for e in claims)
    assert "0.95" in claims[-1].payload["detail"] and "0.41" in claims[-1].payload["detail"]
    finalizer_calls = [e for e in events if e.kind == "model_call" and e.payload["role"] == "finalizer"]
    assert len(finalizer_calls) == 2  # asked once more with the mismatch named
    assert result.agent_status["finalizer"] == "FAILURE"
    # The verified predictions are still scored, but the run does not end plainly "completed":
    # its reason names the finalizer that would not sign the report.
    assert result.status != "completed" or "finalizer" in result.reason
    finished = [e.payload for e in events if e.kind == "agent_finished" and e.agent == "finalizer"][-1]
    assert "claims_match" in finished["message"]


def test_a_report_repeating_a_flattering_printed_score_fails_against_trellis_measurement(
        pendulum, tmp_path, fabricating_model):
    # The program prints validation R² = 0.95 and the report repeats it faithfully, but its
    # predictions are 30% too large: Trellis's own validation folds measure far less. The
    # finalizer (which only sees the printed number) signs; the run's claims check does not.
    executor = BoastfulExecutor(tmp_path / "sandbox", factor=1.3, claimed_r2=0.95)
    sink = ListSink()
    result = run_workflow(pendulum, team_workflow(pendulum),
                          RunConfig(run_dir=tmp_path / "run", seed=1, model_override=fabricating_model,
                                    scoring="validation"), executor=executor, sinks=[sink])
    measured = result.metric["value"]
    assert result.metric["ok"] and measured < 0.8, result.metric
    claims = _checks(sink.events, "claims_match")
    assert claims[0].payload["passed"]  # the finalizer's check against the printed number
    last = claims[-1].payload
    assert not last["passed"] and claims[-1].agent == "finalizer"
    assert "0.95" in last["detail"] and f"{measured:.4g}" in last["detail"] and "Trellis measured" in last["detail"]
    assert "claims_match" in result.reason and f"{measured:.4g}" in result.reason
    # the judge and every search read the latest result of each public check: this one
    from engine.judge import public_checks
    assert not next(c for c in public_checks(sink.events) if c["name"] == "claims_match")["passed"]


def test_a_report_stating_what_trellis_measured_passes_in_a_validation_run(pendulum, tmp_path):
    def run(claimed, name):
        sink = ListSink()
        result = run_workflow(pendulum, team_workflow(pendulum),
                              RunConfig(run_dir=tmp_path / name, seed=1, scoring="validation"),
                              executor=BoastfulExecutor(tmp_path / f"{name}-sandbox", 1.0, claimed), sinks=[sink])
        return result, sink.events

    # An honest line printing R² = 0.9 from a random hold-out; Trellis's extrapolation folds
    # (the question the task asks) measure far less, and the report repeating 0.9 is refused.
    first, _ = run(0.9, "boast")
    assert "claims_match" in first.reason and first.metric["value"] < 0.5
    # The same program printing the score Trellis measures: its report passes.
    result, events = run(first.metric["value"], "honest")
    assert result.metric["value"] == pytest.approx(first.metric["value"])
    assert result.status == "completed" and "claims_match" not in result.reason, result.reason
    claims = _checks(events, "claims_match")
    assert claims and all(e.payload["passed"] for e in claims)
    assert "Trellis" in claims[-1].payload["detail"]
