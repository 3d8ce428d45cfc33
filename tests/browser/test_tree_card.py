"""The tree card names a blend by its parts: a person sees `blend of ridge + svr`, in the node list
and on the champion line, not a nested list of settings."""
from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import SHOTS
from tests.conftest import EXAMPLES
from tests.studio_harness import add_member
from webapp.runs.models import Event, Run, RunStatus
from webapp.tasks.models import Task
from webapp.teams.models import Project

pytestmark = [pytest.mark.django_db(transaction=True)]

BLEND = {"parts": [["ridge", {"alpha": 1.0}], ["svr", {"C": 10.0, "epsilon": 0.05, "gamma": "scale"}]]}


def test_a_blend_node_is_named_by_its_parts(page: Page, studio):
    project = Project.objects.create(name="Blends")
    add_member(project, "ada", "owner")
    task = Task.objects.create(project=project, name="soil", folder=str(EXAMPLES / "soil-respiration-sites"),
                               metric_name="rmse", higher_is_better=False)
    run = Run.objects.create(task=task, search="tree", status=RunStatus.COMPLETED, run_dir="")
    nodes = (("n0", None, "ridge", {"alpha": 1.0}, 0.83), ("n1", "n0", "svr", BLEND["parts"][1][1], 0.80),
             ("n2", "n0", "blend", BLEND, 0.61))
    for seq, (node, parent, strategy, params, score) in enumerate(nodes, start=1):
        Event.objects.create(run=run, seq=seq, source="s", ts=float(seq), kind="tree_node", iteration=min(seq - 1, 2),
                             payload={"node": node, "parent": parent, "iteration": min(seq - 1, 2),
                                      "strategy": strategy, "params": params, "score": score, "status": "scored",
                                      "knowledge": [], "debug_attempts": 0, "verdict": "", "debate_turns": 2,
                                      "report": "", "vetoed": False, "promoted": False, "decided_by": ""})
    page.goto(f"/runs/{run.pk}/")
    items = page.locator("#tree-nodes li")
    expect(items).to_have_count(3)
    expect(items.nth(2)).to_contain_text("n2: blend of ridge + svr ·")
    expect(items.nth(2)).not_to_contain_text('"parts"')
    expect(items.nth(1)).to_contain_text('n1: svr {"C":10')  # any other node keeps its settings
    expect(page.locator("#tree-card")).to_contain_text("champion n2 (blend of ridge + svr")
    page.locator("#tree-card").screenshot(path=str(SHOTS / "test_tree_card-blend.png"))
