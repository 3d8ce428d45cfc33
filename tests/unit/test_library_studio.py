"""The library and a synthesized run in the studio, on the database alone: the library page lists
what synthesis draws on and filters it; a reviewer's edit is checked as the engine reads it
before it is saved (file and history row), a broken one saves nothing, a viewer cannot edit; a
run that started synthesized shows each role's attachments and why, on its node, in its panel
and in the agent's detail, and each repair of its review waits in the queue for a person."""
from __future__ import annotations

import html
import re
import io

import pytest
from django.test import Client

from engine.errors import AwaitingDecision
from engine.evolve import evolve
from engine.run_spec import RunSpec
from tests.fakes import OffTarget
from tests.studio_harness import add_member, running_run
from tests.unit.test_library import SKILL, WordsEmbedder
from webapp.runs.bridge import DatabaseGate, RunEventSink, moot_reason
from webapp.library.models import LibraryEdit
from webapp.runs.models import GatePolicy, Mutation, MutationStatus, Run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def library_dir(tmp_path, monkeypatch):
    folder = tmp_path / "library"
    monkeypatch.setenv("TRELLIS_LIBRARY", str(folder))
    return folder


@pytest.fixture
def run(examples) -> Run:
    return running_run(examples / "diabetes-progression", "p")


def _client(user, run, role):
    add_member(run.task.project, user, role)
    c = Client()
    c.force_login(user)
    return c


def test_the_library_page_lists_and_filters_what_synthesis_draws_on(demo_user, run, library_dir):
    c = _client(demo_user, run, "viewer")
    page = c.get("/library/").content.decode()
    assert "Profile each series before forecasting" in page and "Data profiler" in page
    assert "(task: markdown) -&gt; (report: markdown)" in page
    series = c.get("/library/?kind=skill&q=series").content.decode()
    assert "Profile each series before forecasting" in series and "Fix the cause a traceback names" not in series
    detail = c.get("/library/skill/profile-series").content.decode()
    assert "When to use" in detail and "Check and save" not in detail  # a viewer reads, does not edit
    assert c.post("/library/skill/profile-series", {"text": SKILL}).status_code == 403
    assert c.get("/library/skill/no-such-skill").status_code == 404


def test_a_staff_edit_is_checked_then_saved_with_its_history(demo_user, run, library_dir):
    demo_user.is_staff = True
    demo_user.save()
    c = _client(demo_user, run, "viewer")
    broken = SKILL.replace("roles: coder", "roles: wizard")
    answer = c.post("/library/skill/new", {"name": "forecast-program", "text": broken})
    assert answer.status_code == 400 and "unknown role(s) wizard" in html.unescape(answer.content.decode())
    assert not (library_dir / "forecast-program.md").exists() and not LibraryEdit.objects.exists()
    answer = c.post("/library/skill/new", {"name": "forecast-program", "text": SKILL, "note": "per series"})
    assert answer.status_code == 302
    assert (library_dir / "forecast-program.md").read_text() == SKILL
    edit = LibraryEdit.objects.get()
    assert (edit.kind, edit.name, edit.author, edit.note) == ("skill", "forecast-program", demo_user, "per series")
    # an edit of a shipped skill is saved in the user's folder, which overrides it
    shipped = c.get("/library/skill/profile-series").content.decode()
    assert "Check and save" in shipped
    c.post("/library/skill/profile-series", {"text": SKILL.replace("roles: coder", "roles: analyzer")
                                             .replace("inputs: plan: markdown", "inputs: task: markdown")
                                             .replace("outputs: code: python", "outputs: report: markdown")})
    assert (library_dir / "profile-series.md").is_file()
    assert "user:profile-series.md" in c.get("/library/skill/profile-series").content.decode()


def test_a_synthesized_review_run_shows_its_attachments_and_queues_each_repair(demo_user, run, library_dir, tmp_path):
    c = _client(demo_user, run, "reviewer")
    Run.objects.filter(pk=run.pk).update(search="repair", gate_policy=GatePolicy.MANUAL)
    run.versions.all().delete()  # a studio run's first version is the workflow its search started from
    run.refresh_from_db()
    with pytest.raises(AwaitingDecision):
        evolve(run.task.folder, RunSpec(search="repair", iterations=2, single_agent=False, start="synthesized"),
               run_dir=tmp_path / "run", out=io.StringIO(), executor=OffTarget(tmp_path / "sandbox", shift=2.0),
               embedder=WordsEmbedder(), sinks=[RunEventSink(run, "L")], gate=DatabaseGate(run, "L", moot_reason(run)))
    # the repair waits in the queue, touching only the planner
    waiting = Mutation.objects.get(run=run, status=MutationStatus.PROPOSED)
    proposal = waiting.proposal
    assert proposal["search"] == "repair" and proposal["change"]["target"] == "planner"
    assert set(proposal["diff"]["agents_changed"]) == {"planner"}
    queue = c.get(f"/runs/{run.pk}/queue").content.decode()
    assert "on planner" in queue and "attachment change" in queue and "the first ranked" not in queue
    assert "+ attaches skill:" in html.unescape(queue) and "− takes skill:" in html.unescape(queue)
    # the synthesized graph: attachments on the nodes, the reasons in the panel and the agent's detail
    state = c.get(f"/runs/{run.pk}/graph.json").json()
    labels = {e["data"]["id"]: e["data"]["label"] for e in state["elements"] if "source" not in e["data"]}
    assert re.search(r"\n\+ \d skills?", labels["analyzer"]) and "skill" in labels["planner"]
    panels = html.unescape(c.get(f"/runs/{run.pk}/search").content.decode())
    assert "Synthesized from the library" in panels and "the best-fitting planner skill" in panels
    detail = html.unescape(c.get(f"/runs/{run.pk}/agents/planner").content.decode())
    assert "From the library:" in detail and "the best-fitting planner skill" in detail
