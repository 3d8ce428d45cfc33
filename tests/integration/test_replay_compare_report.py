"""Replay, comparison and report of finished runs (webapp/runs/replay_views.py, compare.py,
report.py). A run is recorded the way a worker records it: typed engine events through the
studio's RunEventSink (two probes, a mutation a person approved, a version), and while it is
recorded the run page's own graph.json is read at chosen moments; the replay must then show
exactly those DAG states at those positions. No worker or Redis needed."""
from __future__ import annotations

import copy
import re
import time

import pytest
from django.core.management import call_command
from django.test import Client

from engine.protocol.events import (AgentFinished, AgentStarted, BudgetLimits, CheckResult, Judgement, RunStarted,
                                    ToolCall, TreeNode)
from engine.trace import Tracer
from tests.studio_harness import add_member, proposed_mutation, running_run
from webapp.annotations.models import Annotation
from webapp.runs.bridge import RunEventSink, decide, record_version
from webapp.runs.models import MutationStatus, Run, RunStatus
from webapp.runs.replay_views import state_at

pytestmark = pytest.mark.django_db(transaction=True)

PROGRAM = "import numpy as np\n# the final workflow's program\nprint('SCORE', 0.1)\n"


def _probe(sink: RunEventSink, name: str, iteration: int, workflow: dict, J: float, fail: str | None,
           snapshot=None) -> None:
    """One probe executing ``workflow``: each agent starts and finishes (``fail`` fails), then the judge.
    ``snapshot(label)`` is called after the first agent started, as a page would look then."""
    tracer = Tracer(name, [sink])
    tracer.iteration = iteration
    agents = [a["id"] for a in workflow["agents"]]
    tracer.emit(RunStarted(task="t", task_title="t", task_fingerprint="f", workflow=workflow,
                           workflow_hash=workflow["hash"], seed=0, executor="fake", budget=BudgetLimits(),
                           order=agents))
    for k, agent in enumerate(agents):
        roles = next(a["roles"] for a in workflow["agents"] if a["id"] == agent)
        tracer.emit(AgentStarted(roles=roles, inputs=[]), agent)
        if snapshot and k == 0:
            snapshot(f"{name}:first-running")
        if "coder" in roles:
            tracer.emit(ToolCall(tool="python", executor="fake", purpose="train", code=PROGRAM, limits={}), agent)
        time.sleep(0.01)
        tracer.emit(AgentFinished(status="FAILURE" if agent == fail else "SUCCESS", message="", outputs={}), agent)
    tracer.emit(Judgement(iteration_n=iteration, workflow_hash=workflow["hash"], ok=True, J=J,
                          scores={"goal_alignment": J, "collaboration_efficiency": J, "output_quality": J,
                                  "answer_plausibility": J},
                          checks=[CheckResult(name="finite predictions", passed=True),
                                  CheckResult(name="beats trivial baseline", passed=fail is None)]), "judge")
    if snapshot:
        snapshot(f"{name}:judged")


def record_run(task_folder, project_name: str, client: Client | None = None, user="ada") -> tuple[Run, dict]:
    """A finished two-probe run; returns it and {seq: the DAG states graph.json showed right after seq}."""
    run = running_run(task_folder, project_name)
    add_member(run.task.project, user, "owner")
    sink = RunEventSink(run, "L")
    shown: dict[int, dict] = {}

    def snapshot(label: str) -> None:
        if client is None:
            return
        seq = Run.objects.get(pk=run.pk).last_seq
        shown[seq] = client.get(f"/runs/{run.pk}/graph.json").json()["states"]

    v1 = run.current_version.data
    _probe(sink, "001-initial", 0, v1, 0.55, None, snapshot)
    time.sleep(0.05)
    child = copy.deepcopy(v1)
    child["agents"][0]["prompt"] = (child["agents"][0].get("prompt") or "") + " Check the units first."
    child["hash"] = "d" * 64
    row = proposed_mutation(run, n=1, key=child["hash"], rationale="the first agent ignores units")
    time.sleep(0.05)
    decide(row, MutationStatus.APPROVED, "user:ada", "units matter here")
    record_version(run, child, "mutator", "prompt_refinement on the first agent", 1)
    time.sleep(0.05)
    last_agent = v1["agents"][-1]["id"]
    _probe(sink, "002-iter1", 1, child, 0.72, last_agent, snapshot)
    result = {"initial": {"workflow_hash": v1["hash"], "J": 0.55, "official": {"ok": True, "value": 0.41}},
              "final": {"workflow_hash": child["hash"], "J": 0.72, "official": {"ok": True, "value": 0.233}},
              "baselines": {"constant": {"ok": True, "value": 0.9}, "nearest_neighbour": {"ok": True, "value": 0.5}},
              "gaps": {"nearest_neighbour": {"baseline": "nearest_neighbour", "difference": 0.267, "low": 0.1,
                                             "high": 0.41, "rows": 88, "resamples": 2000, "verdict": "better",
                                             "scorer": "the engine's rmse"}},
              "hindsight": {"higher_is_better": False,
                            "correlations": [{"a": "J", "b": "official", "n": 2, "rho": -1.0, "p": None, "why": ""}],
                            "candidates": [{"label": "001-initial", "J": 0.55, "validation": 0.5, "official": 0.41,
                                            "official_error": None},
                                           {"label": "002-iter1", "J": 0.72, "validation": 0.3, "official": None,
                                            "official_error": "no predictions.csv"}]}}
    Run.objects.filter(pk=run.pk).update(status=RunStatus.COMPLETED, result=result,
                                         usage={"calls": 12, "tokens": 3456, "cost_usd": 0.0123})
    run.refresh_from_db()
    return run, shown


@pytest.fixture
def client(demo_user) -> Client:
    c = Client()
    c.force_login(demo_user)
    return c


def test_replay_lists_every_event_in_order_and_rebuilds_what_the_page_showed(light_task, client):
    run, shown = record_run(light_task, "Replay", client)
    data = client.get(f"/runs/{run.pk}/replay/events.json").json()
    seqs = [e["seq"] for e in data["events"]]
    assert seqs == list(range(1, run.last_seq + 1)), "every event, once, in seq order"
    assert [e["kind"] for e in data["events"]] == list(run.events.order_by("seq").values_list("kind", flat=True))
    assert all(a["ts"] <= b["ts"] for a, b in zip(data["events"], data["events"][1:]))
    # no field computed from today's database leaks into the past: the first judgement's incumbent
    # is the first probe itself, whatever was adopted later
    first_judged = next(e for e in data["events"] if e["kind"] == "judgement")
    assert first_judged["data"]["point"]["incumbent_J"] == first_judged["data"]["point"]["J"]
    assert "tokens" not in first_judged["data"]["point"]
    assert [m["status"] for m in data["mutations"]] == ["approved"] and data["mutations"][0]["decided_by"] == "user:ada"
    assert [v["number"] for v in data["versions"]] == [1, 2]

    assert len(shown) == 4
    for seq, states in shown.items():
        assert state_at(run, seq)["states"] == states, f"the DAG at event {seq}"
        assert client.get(f"/runs/{run.pk}/replay/state.json?seq={seq}").json()["states"] == states
    # the moments differ: the replay shows the run's past, not its end
    first, *_, last = sorted(shown)
    assert state_at(run, first)["states"] != state_at(run, run.last_seq)["states"]
    assert "failed" in state_at(run, run.last_seq)["states"].values()

    page = client.get(f"/runs/{run.pk}/replay")
    assert page.status_code == 200 and b"replay-slider" in page.content
    assert client.get(f"/runs/{run.pk}/replay/state.json?seq=x").status_code == 400


def test_a_person_outside_the_project_cannot_replay_compare_or_export(light_task, client, django_user_model):
    run, _ = record_run(light_task, "Private")
    other, _ = record_run(light_task, "Private 2")
    outsider = Client()
    outsider.force_login(django_user_model.objects.create_user("eve", password="x" * 12))
    for url in (f"/runs/{run.pk}/replay", f"/runs/{run.pk}/replay/events.json", f"/runs/{run.pk}/report.html",
                f"/compare?runs={run.pk}&runs={other.pk}"):
        assert outsider.get(url).status_code == 404, url


def test_two_runs_side_by_side(light_task, client):
    a, _ = record_run(light_task, "Compare A")
    b, _ = record_run(light_task, "Compare B")
    # a policy's automatic approval is not a person's decision
    decide(proposed_mutation(b, n=2, key="e" * 64), MutationStatus.AUTO_APPROVED, "policy:auto_improve", "J improved")
    response = client.get(f"/compare?runs={a.pk}&runs={b.pk}")
    assert response.status_code == 200
    html = response.content.decode()
    for run in (a, b):
        assert f'data-run="{run.pk}" data-field="final"><strong>0.2330' in html
        assert f'data-run="{run.pk}" data-field="initial">0.4100' in html
    assert "baseline: nearest neighbour" in html and "3456" in html and "$0.0123" in html
    # the baselines' official scores as the engine stores them (a metric dict), not "–"
    assert "<td>0.5000</td>" in html and "<td>0.9000</td>" in html
    assert "The two final workflows are the same." in html
    assert html.count('"incumbent_J"') == 2  # both J curves for the chart
    assert re.search(r"people's decisions</th>\s*<td>1</td>\s*<td>1</td>", html)
    assert re.search(r"decided by the gate policy</th>\s*<td>0</td>\s*<td>1</td>", html)
    bad = client.get(f"/compare?runs={a.pk}")
    assert bad.status_code == 400 and "at least two runs" in bad.content.decode()
    assert client.get("/compare?runs=1,x").status_code == 400


def _final_predictions(run: Run, task_folder) -> None:
    """What engine/evolve.py writes after the final commitment: the final workflow's predictions."""
    from pathlib import Path

    from engine.ending import FINAL_PREDICTIONS

    truth = (Path(task_folder) / "heldout" / "test_targets.csv").read_text().splitlines()[1:]
    rows = [line.split(",") for line in truth]
    folder = Path(run.run_dir or Path(task_folder).parent / f"run-{run.pk}")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / FINAL_PREDICTIONS).write_text("id,y\n" + "".join(f"{i},{float(y) * 0.9 + 0.01}\n" for i, y in rows))
    Run.objects.filter(pk=run.pk).update(run_dir=str(folder))
    run.refresh_from_db()


def test_report_is_one_self_contained_file_with_metric_workflow_and_decisions(light_task, client, demo_user, tmp_path):
    run, _ = record_run(light_task, "Report")
    _final_predictions(run, light_task)
    long_reason = "word " * 200 + "tail"
    run.mutations.update(reason=long_reason)
    Annotation.objects.create(run=run, target_kind="mutation", target_ref=str(run.mutations.get().pk),
                              labels=["good idea"], comment="units were the problem", author=demo_user)
    response = client.get(f"/runs/{run.pk}/report.html")
    assert response.status_code == 200 and "attachment" in response["Content-Disposition"]
    html = response.content.decode()
    assert not re.search(r"https?://", html), "a self-contained report requests nothing"
    assert not re.search(r"<(script|link|img|iframe)\b", html)
    assert '<td class="num" id="metric-final"><strong>0.2330</strong>' in html
    assert '<td class="num">0.5000</td>' in html  # the nearest neighbour's official score
    assert re.search(r"<th>nearest neighbour</th><td class=\"num\">0.2670</td><td class=\"num\">0.1000 to 0.4100</td>"
                     r"<td>better</td>", html), "the team's lead over the baseline and its interval"
    assert '<svg class="workflow"' in html
    for agent in run.current_version.data["agents"]:
        assert agent["id"] in html
    assert "user:ada" in html   # who decided
    assert re.search(r"(word ){10,}word…", html) and "wor…" not in html and "tail" not in html.split('<section id="decisions">')[1]
    assert "units were the problem" in html                     # the annotation
    assert "the final workflow&#x27;s program" in html or "the final workflow's program" in html
    assert "beats trivial baseline" in html
    assert "Spearman ρ -1.00 (n=2)" in html and "no predictions.csv" in html   # the hindsight

    # issue 26 item 7: the task's markdown rendered (no raw "##"), reasons cut at a word, the
    # held-out plots drawn from the final predictions
    assert "<h2>" in html.split('<section id="task">')[1].split("</section>")[0]
    assert "## " not in html.split('<section id="task">')[1].split("</section>")[0]
    assert '<section id="predictions">' in html and 'aria-label="Prediction vs truth (held out)"' in html
    assert 'aria-label="Residuals (prediction − truth)"' in html

    pdf = client.get(f"/runs/{run.pk}/report.pdf")
    assert pdf.status_code == 200 and pdf.content.startswith(b"%PDF")
    import io

    from pypdf import PdfReader

    pages = PdfReader(io.BytesIO(pdf.content)).pages
    blank = [k + 1 for k, page in enumerate(pages) if not page.extract_text().strip()]
    assert not blank, f"blank page(s) {blank} of {len(pages)}"

    out = tmp_path / "r.html"
    call_command("report", str(run.pk), "--out", str(out), "--pdf")
    assert out.read_text().startswith("<!doctype html>") and (tmp_path / "r.pdf").read_bytes().startswith(b"%PDF")


def _tree_node(tracer: Tracer, node: str, parent: str | None, score: float) -> None:
    tracer.emit(TreeNode(node=node, parent=parent, iteration=tracer.iteration, params={}, score=score, status="scored",
                         knowledge=[], debug_attempts=0, verdict="ok", debate_turns=0, report="long report"), "tree")


def record_tree_run(task_folder, project_name: str) -> Run:
    """A finished tree run of three nodes (lower is better: n2 wins); n3's program ran last."""
    run = running_run(task_folder, project_name)
    add_member(run.task.project, "ada", "owner")
    Run.objects.filter(pk=run.pk).update(search="tree")
    run.task.higher_is_better = False  # a loss: the lower score wins
    run.task.save()
    tracer = Tracer("search", [RunEventSink(run, "L")])
    tracer.iteration = 1
    tracer.emit(ToolCall(tool="python", executor="fake", purpose="train", code="# champion program\n", limits={},
                         node="n2"), "engineer")
    _tree_node(tracer, "n1", None, 0.5)
    _tree_node(tracer, "n2", "n1", 0.3)
    tracer.emit(ToolCall(tool="python", executor="fake", purpose="train", code="# a later, worse program\n",
                         limits={}, node="n3"), "engineer")
    _tree_node(tracer, "n3", "n1", 0.9)
    Run.objects.filter(pk=run.pk).update(status=RunStatus.COMPLETED)
    run.refresh_from_db()
    return run


def test_a_tree_run_replays_its_nodes_and_reports_the_champions_code(light_task, client):
    run = record_tree_run(light_task, "Tree report")
    events = client.get(f"/runs/{run.pk}/replay/events.json").json()["events"]
    nodes = [e["data"] for e in events if e["kind"] == "tree_node"]
    assert [n["node"] for n in nodes] == ["n1", "n2", "n3"] and [n["score"] for n in nodes] == [0.5, 0.3, 0.9]
    assert all("tree" not in n and "report" not in n for n in nodes), "the event's own fields, not the tree of now"
    html = client.get(f"/runs/{run.pk}/report.html").content.decode()
    assert "Program: champion n2" in html and "# champion program" in html and "worse program" not in html
    # issue 26 item 7: the report draws the tree, the champion marked
    tree = re.search(r'<svg class="tree".*?</svg>', html, re.S).group(0)
    assert all(f">{n}" in tree for n in ("n1", "n2 ★", "n3")) and tree.count("<line") == 2
