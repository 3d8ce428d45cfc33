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
    return read_facts(*pf.reading_view(messages))


def planned_keys(task_dir: Path, report: str = REPORT, seeds: range = range(10)) -> set[str]:
    return {pf.extract_strategy(scientist.respond(prompt("planner", task_dir, {"report": report}), seed=s))[0]
            for s in seeds}


def labelled(n: int = 90, label_type: str = "int") -> tuple[pd.DataFrame, pd.DataFrame]:
    rng = np.random.default_rng(1)
    x = rng.normal(size=(n, 2))
    labels = (x[:, 0] + x[:, 1] > 0).astype(int)
    train = pd.DataFrame({"id": range(n), "a": x[:, 0], "b": x[:, 1],
                          "outcome": labels if label_type == "int" else np.where(labels, "yes", "no")})
    test = pd.DataFrame({"id": range(500, 520), "a": rng.normal(size=20), "b": rng.normal(size=20)})
    return train, test


def test_classification_is_read_from_the_metric_the_contract_or_the_words_not_the_column_count(tmp_path):
    train, test = labelled()
    by_metric = make_task(tmp_path / "m", metric="accuracy", direction="higher is better", target_type="int",
                          train=train, test=test)
    facts = facts_of(by_metric)
    assert (facts.kind, facts.family, facts.target_type, facts.n_features) == \
        ("classification", "classification", "int", 2)
    str_train, str_test = labelled(label_type="str")
    by_contract = make_task(tmp_path / "c", metric="custom_score", target_type="str", train=str_train, test=str_test)
    assert facts_of(by_contract).kind == "classification"
    by_words = make_task(tmp_path / "w", metric="custom_score", target_type="int", train=train, test=test,
                         goal="Classify each sample into one of the two outcome classes.")
    assert facts_of(by_words).kind == "classification"
    # An error metric settles it: an integer count scored by RMSE is a regression.
    counts = make_task(tmp_path / "r", metric="rmse", target_type="int", train=train, test=test,
                       goal="Classify nothing; predict how many events occur.")
    assert facts_of(counts).kind == "regression"
    one_feature = make_task(tmp_path / "one", metric="balanced_accuracy", direction="higher is better",
                            target_type="int", train=train.drop(columns="b"), test=test.drop(columns="b"))
    assert facts_of(one_feature).family == "classification"  # one column, yet not curve fitting


def test_a_classification_task_gets_a_classifier_whose_program_writes_labels_of_the_contract_type(tmp_path):
    train, test = labelled()
    task = make_task(tmp_path / "t", metric="accuracy", direction="higher is better", target_type="int",
                     train=train, test=test)
    classifiers = {"majority_baseline", "logistic_regression", "random_forest_classifier",
                   "gradient_boosting_classifier", "knn_classifier", "svc"}
    for seed in range(6):
        plan = scientist.respond(prompt("planner", task, {"report": REPORT}), seed=seed)
        assert pf.extract_strategy(plan)[0] in classifiers
        code = pf.extract_code(scientist.respond(prompt("coder", task, {"plan": plan}), seed=seed))
        assert "np.rint(values.astype(float)).astype(np.int64)" in code  # integers for an int contract
        assert "validation_accuracy" in code and "to_numpy(dtype=float)\n    X_test" not in code


def test_a_planner_asked_for_an_approach_chooses_the_strategy_that_answers_the_whole_request(tmp_path):
    """The mutator's and the editors' requests name several traits of one approach; the strategy
    that has all of them is chosen on every seed, never one sharing only some of them by chance
    (a kernel classifier shares 'regularised classifier on scaled features' with a logistic one)."""
    from engine.offline.mutator import MODEL_HINTS

    train, test = labelled()
    task = make_task(tmp_path / "t", metric="accuracy", direction="higher is better", target_type="int",
                     train=train, test=test)
    wanted = {"a regularised logistic classifier": "logistic_regression", "a kernel classifier": "svc"}
    for hint in (h for h in MODEL_HINTS if h.label in wanted):
        chosen = {pf.extract_strategy(scientist.respond(prompt("planner", task, {"report": REPORT},
                                                               instructions=hint.text), seed=seed))[0]
                  for seed in range(12)}
        assert chosen == {wanted[hint.label]}, hint.label


def test_a_first_plan_uses_the_conventional_settings_and_one_already_tried_is_tuned(tmp_path):
    from engine.offline.strategies import get_strategy

    task = make_task(tmp_path / "t", n_features=3)
    tuned = 0
    for seed in range(8):
        key, params = pf.extract_strategy(scientist.respond(prompt("planner", task, {"report": REPORT}), seed=seed))
        strategy = get_strategy(key)
        defaults = json.loads(json.dumps(strategy.default_params()))  # as a plan writes them (tuples as lists)
        assert params == defaults
        memory = f"- #4 check_result by verifier · iteration 1: SCORE rmse = 0.5 for strategy: {key} {json.dumps(params)}"
        text = scientist.respond(prompt("planner", task, {"report": REPORT, "memory": memory},
                                        instructions=" ".join(sorted(strategy.tags))), seed=seed)
        again, retuned = pf.extract_strategy(text)
        if again == key and retuned != defaults:
            tuned += 1
            assert "tuning step" in text
    assert tuned  # asked for the same traits again, the planner tries other settings of that approach


def test_must_extrapolate_comes_from_the_text_or_the_data_report_and_rules_out_trees_and_neighbours(tmp_path):
    beyond = make_task(tmp_path / "b", context="The test set holds lengths beyond the training range.")
    assert facts_of(beyond).extrapolate
    assert not facts_of(make_task(tmp_path / "n", context="No extrapolation is needed: test lengths are "
                                                         "inside the measured interval.")).extrapolate
    report = REPORT + ("\n- test inputs outside the training range in 1 feature(s); the test set asks for "
                       "extrapolation")
    plain = make_task(tmp_path / "p")
    assert not facts_of(plain).extrapolate and facts_of(plain, report).extrapolate
    safe = {"low_poly", "power_law", "form_search", "symbolic_regression"}
    assert planned_keys(beyond) <= safe and planned_keys(plain, report) <= safe
    code = pf.extract_code(scientist.respond(prompt("coder", beyond, {"plan": "strategy: power_law {}"}), seed=0))
    assert "def extrapolation_direction" in code  # it validates on the far tail, not random rows


def test_physics_monotone_and_positive_are_read_and_physics_leans_the_plan_to_laws(tmp_path):
    task = make_task(tmp_path / "t", context="Known physics is welcome. The period is strictly positive and "
                                             "increases with the length.")
    facts = facts_of(task)
    assert facts.physics and facts.positive and facts.monotone and not facts.extrapolate
    lawful = {"power_law", "form_search", "low_poly", "symbolic_regression"}
    plain = make_task(tmp_path / "plain")
    seeds = range(30)
    with_physics = sum(k in lawful for k in (pf.extract_strategy(scientist.respond(
        prompt("planner", task, {"report": REPORT}), seed=s))[0] for s in seeds))
    without = sum(k in lawful for k in (pf.extract_strategy(scientist.respond(
        prompt("planner", plain, {"report": REPORT}), seed=s))[0] for s in seeds))
    assert with_physics > without


def test_a_jump_is_read_only_when_the_text_or_the_report_says_so_never_from_a_sampling_gap(tmp_path):
    task = make_task(tmp_path / "t")
    gap = REPORT + ("\n- sampling gap: no training samples between length = 0.39 and 0.70 (70x the median "
                    "spacing); the target is unobserved there, and a gap alone says nothing about its shape")
    assert not facts_of(task, gap).discontinuity
    jump = "## Structure\n\n- strong evidence of a discontinuity: a single smooth global model will ring around it"
    assert facts_of(task, jump).discontinuity
    said = make_task(tmp_path / "said", context="The response jumps at an unknown threshold.")
    assert facts_of(said).discontinuity and not facts_of(make_task(
        tmp_path / "not", context="The response has no jumps.")).discontinuity
    assert "piecewise_poly" not in planned_keys(task, gap, range(12))


def test_without_a_feature_list_programs_use_the_test_file_s_columns_never_a_guessed_name(tmp_path):
    messages = prompt("coder", make_task(tmp_path / "t"), {"plan": "strategy: ridge {}"})
    # A description that names no features (the engine normally lists the test file's columns).
    messages[0]["content"] = re.sub(r"^- feature columns: .*\n", "", messages[0]["content"], flags=re.M)
    code = pf.extract_code(scientist.respond(messages, seed=0))
    assert "FEATURES = []" in code and "'x'" not in code
    assert "c in train.columns" in code  # a training-only column is never a feature


# --- the debugger ---------------------------------------------------------------------------------------
def debug(task_dir: Path, code: str, detail: dict, seed: int = 0) -> str:
    return scientist.respond(prompt("debugger", task_dir, {"code": code}, feedback={
        "from": "verifier", "status": "RETRY", "detail": detail}), seed=seed)


def rendered(task_dir: Path, key: str, params: dict | None = None, seed: int = 0) -> str:
    return pf.extract_code(scientist.respond(prompt("coder", task_dir, {"plan": pf.strategy_line(key, params or {})}),
                                             seed=seed))


def test_the_debugger_says_no_repair_instead_of_handing_back_the_code_it_was_given(tmp_path):
    task = make_task(tmp_path / "t")
    code = rendered(task, "low_poly", {"degree": 2})
    # Nothing in the evidence points at the code: re-rendering it would give the same program.
    answer = debug(task, code, {"status": "error", "stderr_tail": "Killed\n"})
    assert pf.extract_code(answer) is None and pf.extract_status(answer) == "FAILURE"
    assert scientist.NO_REPAIR in answer
    # A column the data lacks (the program spells it as declared): the task's files need fixing.
    missing = ('Traceback (most recent call last):\n  File "/tmp/x/main.py", line 40, in load_data\n'
               "KeyError: 'period'\n")
    answer = debug(task, code, {"status": "error", "stderr_tail": missing})
    assert pf.extract_code(answer) is None and scientist.NO_REPAIR in answer and "KeyError" in answer
    # A crash while fitting is a reason to change the approach: a real change, not the same code.
    crash = ('Traceback (most recent call last):\n  File "/tmp/x/main.py", line 9, in fit_predict\n'
             "ZeroDivisionError: division by zero\n")
    changed = pf.extract_code(debug(task, code, {"status": "error", "stderr_tail": crash}))
    assert changed and pf.extract_strategy(changed)[0] != "low_poly"
    # A timeout with non-default settings is repairable: the cheapest settings are a real change.
    costly = rendered(task, "low_poly", {"degree": 3})
    repaired = pf.extract_code(debug(task, costly, {"status": "timeout", "stderr_tail": ""}))
    assert repaired is not None and repaired != costly and '"degree": 2' in repaired


def test_the_debugger_changes_an_approach_that_does_not_fit_the_task(tmp_path):
    train, test = labelled()
    task = make_task(tmp_path / "c", metric="accuracy", direction="higher is better", target_type="int",
                     train=train, test=test)
    regressor = (rendered(make_task(tmp_path / "r", train=train.assign(outcome=train.outcome * 1.5), test=test),
                          "ridge"))
    answer = debug(task, regressor, {"status": "ok", "checks": [{"name": "output_schema", "passed": False}]})
    fixed = pf.extract_code(answer)
    assert fixed and pf.extract_strategy(fixed)[0] in {"logistic_regression", "random_forest_classifier",
                                                       "gradient_boosting_classifier", "knn_classifier", "svc"}
    beyond = make_task(tmp_path / "b", context="Scored on lengths outside the training range.")
    wild = rendered(beyond, "low_poly", {"degree": 3})
    out = pf.extract_code(debug(beyond, wild, {"status": "ok", "checks": [{"name": "within_range", "passed": False}]}))
    assert out and pf.extract_strategy(out)[0] in {"power_law", "form_search", "low_poly"} and out != wild


# --- the analyzer's report stays bounded --------------------------------------------------------------------
def run_analysis(task_dir: Path, seed: int = 0) -> str:
    import subprocess
    import sys
    code = pf.extract_code(scientist.respond(prompt("analyzer", task_dir), seed=seed))
    proc = subprocess.run([sys.executable, "-c", code], cwd=task_dir, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_the_analyzer_s_report_on_256_columns_stays_a_few_thousand_characters(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(150, 256)) * rng.uniform(0.1, 100, size=256)
    names = [f"sensor_{i:03d}" for i in range(256)]
    train = pd.DataFrame(x, columns=names)
    train["y"] = x[:, 3] - 2 * x[:, 17] + rng.normal(size=150)
    train.insert(0, "id", range(150))
    test = pd.DataFrame(rng.normal(size=(40, 256)), columns=names)
    test.insert(0, "id", range(1000, 1040))
    report = run_analysis(make_task(tmp_path / "wide", n_features=256, train=train, test=test))
    assert len(report) < 4000, len(report)
    assert "256 feature columns" in report and "more)" in report
    assert sum(line.startswith("| ") for line in report.splitlines()) <= 15  # only the top correlations


def test_the_analyzer_reports_a_sampling_gap_as_a_gap_and_a_jump_as_a_jump(tmp_path):
    rng = np.random.default_rng(3)
    x = np.sort(np.concatenate([rng.uniform(0.1, 0.4, 50), rng.uniform(0.75, 1.0, 50)]))
    smooth = pd.DataFrame({"id": range(100), "length": x, "period": 2 * np.sqrt(x) + 0.005 * rng.normal(size=100)})
    test = pd.DataFrame({"id": range(200, 230), "length": np.linspace(0.1, 1.0, 30)})
    report = run_analysis(make_task(tmp_path / "gap", train=smooth, test=test))
    assert "sampling gap" in report and "no dominant jump" in report
    assert "outside the training range" in report and not facts_of(tmp_path / "gap", report).extrapolate
    stepped = smooth.assign(period=smooth.period + np.where(smooth.length > 0.85, 1.0, 0.0))
    report = run_analysis(make_task(tmp_path / "jump", train=stepped, test=test))
    assert "strong evidence of a discontinuity" in report and facts_of(tmp_path / "jump", report).discontinuity


def with_resources(messages: list[dict], *lines: str) -> list[dict]:
    """The prompt with lines added to the task's Resources, as a Data_config declaring them writes
    (a declared kind replaces the line that says which kind Trellis decided)."""
    system = messages[0]["content"]
    if any(line.startswith("- task kind:") for line in lines):
        system = re.sub(r"^- task kind: .*\n", "", system, flags=re.M)
    system = system.replace("- write predictions to", "\n".join(lines) + "\n- write predictions to", 1)
    return [{**messages[0], "content": system}, *messages[1:]]


def test_declared_kind_constraints_and_validation_in_the_resources_are_read(tmp_path):
    task = make_task(tmp_path / "t", metric="custom_score")
    base = prompt("planner", task, {"report": REPORT})
    declared = with_resources(base, "- task kind: classification",
                              "- known constraints: `period` >= 0; `period` increasing in `length`",
                              "- in-loop validation: holdout_range on `length`: the 20% of rows with the highest "
                              "`length` validate")
    facts = read_facts(*pf.reading_view(declared))
    assert facts.kind == "classification" and facts.positive and facts.monotone and facts.extrapolate
    grouped = with_resources(base, "- in-loop validation: group on `site`: whole groups held out (4 folds)")
    facts = read_facts(*pf.reading_view(grouped))
    assert facts.group_column == "site" and not facts.extrapolate
    plan = scientist.respond(grouped, seed=0)
    coder = with_resources(prompt("coder", task, {"plan": plan}),
                           "- in-loop validation: group on `site`: whole groups held out (4 folds)")
    code = pf.extract_code(scientist.respond(coder, seed=0))
    assert "GROUP_COLUMN = 'site'" in code and "groups held out whole" in code


def test_a_strategy_needing_a_library_the_task_does_not_allow_is_never_chosen():
    from engine.offline.reading import TaskFacts, libraries_allowed
    from engine.offline.scientist import applicable, strategy_from

    stack = libraries_allowed("- Use only Python with numpy, scipy, pandas and scikit-learn. No downloads.")
    assert stack and "pyoperon" not in stack
    free = TaskFacts(n_features=3, extrapolate=True, physics=True)
    bound = TaskFacts(n_features=3, extrapolate=True, physics=True, libraries=stack)
    assert "symbolic_regression" in {s.key for s in applicable(free)}
    assert "symbolic_regression" not in {s.key for s in applicable(bound)}
    # a plan that names it anyway gets an allowed strategy instead
    chosen, _ = strategy_from("strategy: symbolic_regression(max_length=25)", bound)
    assert chosen.key != "symbolic_regression" and bound.allows(chosen.requires)


def test_the_coder_clips_onto_the_bounds_the_task_declares_and_only_those(tmp_path):
    bounded = make_task(tmp_path / "bounded")
    config = json.loads((bounded / "Data_config.json").read_text())
    (bounded / "Data_config.json").write_text(json.dumps({**config, "constraints": {"min": 0, "max": 7.5}}))
    free = make_task(tmp_path / "free")

    def program(task_dir: Path) -> str:
        plan = scientist.respond(prompt("planner", task_dir, {"report": REPORT}), seed=3)
        return pf.extract_code(scientist.respond(prompt("coder", task_dir, {"plan": plan, "report": REPORT}), seed=3))

    assert "LOWER, UPPER = 0.0, 7.5" in program(bounded)
    assert "LOWER, UPPER" not in program(free) and "declares no bounds" in program(free)
