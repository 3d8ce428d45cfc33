"""The neural strategy (a PyTorch mixture of experts, engine/offline/neural.py) is an option only
where the task allows a network: read from what the task says, never from a task's name. Where it
is allowed the team's planner and the tree's proposer reach it; elsewhere nothing chooses it, a
plan naming it included. Nothing trains here: the sandboxed training, its metrics lines,
checkpoint and resume are in tests/integration/test_neural_strategy.py."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine import prompt_format as pf
from engine.offline import scientist, tree_roles
from engine.offline.scientist import applicable, strategy_from
from engine.task import load_task
from tests.unit.test_offline_scientist import REPORT, facts_of, make_task, prompt

KEY = "mixture_of_experts"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
JUMPS = "The signal is piecewise smooth: it jumps at two unknown positions and has a kink between them."


def signal(n: int = 80) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two jumps and a kink on [0, 1] (neither shipped example's function)."""
    rng = np.random.default_rng(3)
    x = rng.uniform(0.0, 1.0, n)
    y = np.abs(x - 0.3) + np.where(x > 0.55, 1.0, 0.0) - np.where(x > 0.8, 0.7, 0.0)
    return (pd.DataFrame({"x": x, "level": y + 0.01 * rng.standard_normal(n)}),
            pd.DataFrame({"id": range(40), "x": np.linspace(0.0, 1.0, 40)}))


@pytest.fixture(scope="module")
def tasks(tmp_path_factory) -> dict[str, Path]:
    """The same jumpy task under requirements that allow a network in two ways, and four that do not."""
    base = tmp_path_factory.mktemp("neural")
    train, test = signal()
    requirements = {
        "sentence": ("CPU only.", "A neural network (PyTorch) may be used."),
        "library_list": ("Use only Python with numpy, pandas and PyTorch.",),
        "silent": ("CPU only.",),
        "stack_only": ("Use only Python with numpy, scipy, pandas and scikit-learn.",),
        "forbidden": ("Neural networks are not allowed.",),
        "torch_unlisted": ("Use only numpy and scikit-learn.", "A neural network may be used."),
    }
    return {name: make_task(base / name, context=JUMPS, requirements=lines, train=train, test=test)
            for name, lines in requirements.items()}


def planned(task_dir: Path, seeds: range = range(20)) -> Counter:
    return Counter(pf.extract_strategy(scientist.respond(prompt("planner", task_dir, {"report": REPORT}),
                                                         seed=s))[0] for s in seeds)


def test_a_network_is_allowed_only_where_the_task_says_so(tasks, tmp_path):
    assert facts_of(tasks["sentence"]).neural and facts_of(tasks["library_list"]).neural
    assert "torch" in facts_of(tasks["library_list"]).libraries  # "PyTorch" is the torch distribution
    for name in ("silent", "stack_only", "forbidden"):
        assert not facts_of(tasks[name]).neural, name
    # Naming networks is not allowing them: the context of a task that discusses their weakness.
    train, test = signal()
    discussed = make_task(tmp_path / "discussed", train=train, test=test,
                          context=JUMPS + " Standard neural networks smear such jumps.")
    assert not facts_of(discussed).neural
    # Allowed, but the task's closed library list leaves torch out: the list wins.
    unlisted = facts_of(tasks["torch_unlisted"])
    assert unlisted.neural and KEY not in {s.key for s in applicable(unlisted)}


def test_where_a_network_is_allowed_the_planner_mostly_chooses_the_mixture_of_experts(tasks):
    for name in ("sentence", "library_list"):
        counts = planned(tasks[name])
        assert counts.most_common(1)[0][0] == KEY, counts
    plan = scientist.respond(prompt("planner", tasks["sentence"], {"report": REPORT}), seed=0)
    assert pf.extract_strategy(plan)[0] == KEY and "neural network allowed" in plan
    code = pf.extract_code(scientist.respond(prompt("coder", tasks["sentence"], {"plan": plan}), seed=0))
    assert pf.extract_strategy(code)[0] == KEY and "import torch" in code


def test_without_the_permission_nothing_chooses_it_not_even_a_plan_that_names_it(tasks):
    for name in ("silent", "stack_only", "forbidden", "torch_unlisted"):
        assert KEY not in planned(tasks[name]), name
        facts = facts_of(tasks[name])
        chosen, _ = strategy_from(pf.strategy_line(KEY, {"experts": 4}), facts)
        assert chosen.key != KEY and facts.allows(chosen.requires)


def test_the_tree_search_draws_it_from_the_same_library_only_where_allowed(tasks):
    def options(name: str) -> set[str]:
        return set(tree_roles._options(pf.reading_view(prompt("proposer", tasks[name]))[1]))

    assert KEY in options("sentence") and KEY not in options("silent")
    proposals = Counter(pf.extract_strategy(scientist.respond(prompt("proposer", tasks["sentence"]), seed=s))[0]
                        for s in range(12))
    assert proposals[KEY] > 0, proposals


def test_of_the_shipped_examples_only_the_one_that_allows_a_network_offers_it():
    offered = {}
    for folder in sorted(p for p in EXAMPLES.iterdir() if (p / "Problem.md").is_file()):
        task = load_task(folder)
        messages = pf.build_messages("planner", "Plan.", "Answer in the format.", task.description(), {})
        facts = scientist.read_facts(*pf.reading_view(messages))
        offered[folder.name] = KEY in {s.key for s in applicable(facts)}
    assert offered.pop("dam-break-neural") is True
    assert offered and not any(offered.values()), offered
