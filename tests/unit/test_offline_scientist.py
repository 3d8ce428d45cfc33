"""The offline scientist reads the task like a model would: its answers follow the run seed and
what the prompt says, never the folder, title or wording. Prompts are built from generated task
folders (engine.task.load_task), nothing runs in a sandbox."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine import prompt_format as pf
from engine.harness import DEFAULT_PROCEDURES
from engine.offline import scientist
from engine.offline.reading import read_facts
from engine.task import load_task

EVALUATE = "import sys, json\nprint(json.dumps({'metric': 'm', 'value': 0.0, 'higher_is_better': False, 'n': 1}))\n"


def make_task(folder: Path, *, title: str = "Period of a pendulum", goal: str | None = None,
              context: str = "Lengths were measured in a lab.", requirements: tuple[str, ...] = ("CPU only.",),
              metric: str = "relative_l2", direction: str = "lower is better", n_features: int = 1,
              target_type: str = "float", train: pd.DataFrame | None = None,
              test: pd.DataFrame | None = None) -> Path:
    """A complete task folder with generated data (a smooth law of the first feature)."""
    rng = np.random.default_rng(0)
    names = ["length"] if n_features == 1 else [f"f{i}" for i in range(n_features)]
    if train is None:
        x = rng.uniform(0.1, 1.0, size=(60, n_features))
        train = pd.DataFrame(x, columns=names)
        train["period"] = 2.0 * np.sqrt(x[:, 0])
        train.insert(0, "id", range(len(train)))
    if test is None:
        test = pd.DataFrame(rng.uniform(0.1, 1.0, size=(20, n_features)), columns=names)
        test.insert(0, "id", range(1000, 1000 + len(test)))
    features = [c for c in test.columns if c != "id"]
    target = next(c for c in train.columns if c not in test.columns)
    (folder / "data").mkdir(parents=True, exist_ok=True)
    train.to_csv(folder / "data" / "train.csv", index=False)
    test.to_csv(folder / "data" / "test_features.csv", index=False)
    goal = goal or f"Predict `{target}` for every test row."
    (folder / "Problem.md").write_text(f"# {title}\n\n## Goal\n{goal}\n\n## Context\n{context}\n")
    (folder / "Requirements.md").write_text("".join(f"- {r}\n" for r in requirements))
    (folder / "Evaluation.md").write_text(f"# Evaluation\n\n## Metric\nname: {metric}\ndirection: {direction}\n")
    (folder / "evaluate.py").write_text(EVALUATE)
    (folder / "Data_config.json").write_text(json.dumps({
        "files": {"train": "data/train.csv", "test_features": "data/test_features.csv"},
        "target": target, "id_column": "id", "features": features,
        "predictions": {"file": "predictions.csv", "columns": {"id": "int", target: target_type}}}))
    return folder


def prompt(role: str, task_dir: Path, inputs: dict | None = None, *, instructions: str | None = None,
           feedback: dict | None = None) -> list[dict]:
    task = load_task(task_dir)
    procedure = DEFAULT_PROCEDURES.get(role, f"Play the {role}.")
    return pf.build_messages(role, procedure, "Answer in the format.", task.description(), inputs or {},
                             instructions=instructions, feedback=feedback)


REPORT = ("# Exploratory data analysis\n\n- training rows: 60; test rows: 20\n\n## Structure\n\n"
          "- no dominant jump: the target looks smooth at this sampling density")


def plan_and_seed(task_dir: Path, seed: int, **kw) -> tuple[tuple, int]:
    plan = scientist.respond(prompt("planner", task_dir, {"report": REPORT}, **kw), seed=seed)
    code = pf.extract_code(scientist.respond(prompt("coder", task_dir, {"plan": plan, "report": REPORT}), seed=seed))
    return pf.extract_strategy(plan), int(re.search(r"^SEED = (\d+)$", code, re.M).group(1))


# --- deterministic in the run seed and the content ------------------------------------------------------
def test_a_renamed_or_reworded_task_gets_the_same_strategy_and_program_seed(tmp_path):
    original = make_task(tmp_path / "pendulum", goal="Predict `period` for every test row.",
                         context="Lengths were measured in a lab.")
    renamed = tmp_path / "copy-of-the-task-under-another-name"
    shutil.copytree(original, renamed)
    reworded = make_task(tmp_path / "third", title="How long does a pendulum swing take?",
                         goal="For each row of the test file, give the value of `period`.",
                         context="\n\nLengths were   measured in a lab.\n\n\n")
    for seed in range(6):
        first = plan_and_seed(original, seed)
        assert plan_and_seed(renamed, seed) == first
        assert plan_and_seed(reworded, seed) == first


def test_the_program_seed_is_the_run_seed_s_alone_and_a_different_run_may_choose_differently(tmp_path):
    task = make_task(tmp_path / "t")
    answers = {seed: plan_and_seed(task, seed) for seed in range(12)}
    assert {s: p for s, (_, p) in answers.items()} == {s: scientist.program_seed(s) for s in answers}
    assert len({p for _, p in answers.values()}) > 1
    assert len({json.dumps(plan) for plan, _ in answers.values()}) > 1  # runs differ in what they try
    # Within one run every program carries the same seed, whatever strategy the plan names.
    for plan in ('strategy: knn {"n_neighbors": 5}', "strategy: global_poly {}", "no strategy named"):
        code = scientist.respond(prompt("coder", task, {"plan": plan, "report": REPORT}), seed=7)
        assert f"SEED = {scientist.program_seed(7)}\n" in code


def test_instructions_change_the_answer_only_through_what_they_ask_for(tmp_path):
    task = make_task(tmp_path / "t")
    plain = [plan_and_seed(task, s, instructions="Print the validation score with six decimals.") for s in range(8)]
    assert plain == [plan_and_seed(task, s, instructions="Please print every score to six decimal places.")
                     for s in range(8)]
    assert plain == [plan_and_seed(task, s) for s in range(8)]  # asks for no trait of an approach


def test_the_key_ignores_paths_and_line_numbers_of_a_traceback(tmp_path):
    def sig(path: str, line: int) -> str:
        return scientist.failure_signature(json.dumps({"status": "error", "stderr_tail": (
            f'Traceback (most recent call last):\n  File "{path}/main.py", line {line}, in <module>\n'
            "ValueError: could not convert string to float: 'a'\n")}))
    assert sig("/tmp/sandbox-abc", 3) == sig("/var/other/xyz", 40)
    assert json.loads(sig("/tmp/a", 1))["exception"] == ["ValueError"]


# --- facts read from the task -----------------------------------------------------------------------------
def facts_of(task_dir: Path, report: str = REPORT):
    messages = prompt("planner", task_dir, {"report": report})
    return read_facts(messages[0]["content"], messages[1]["content"])
