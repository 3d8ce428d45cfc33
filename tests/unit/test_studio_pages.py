"""The studio's pages and its human gate, on the database alone (no worker needed): gate
policies, the contract/procedure editor's validation, the trace viewer's filters and paging."""
from __future__ import annotations

import html
import re

import pytest
from django.test import Client

from tests.studio_harness import add_member, proposed_mutation, running_run
from engine.errors import AwaitingDecision
from engine.protocol.gate import Change, Check, Decision, Evidence, Proposal
from webapp.runs.bridge import DatabaseGate, RunEventSink, decide, moot_reason
from webapp.runs.models import Event, GatePolicy, Mutation, MutationStatus, Run, RunStatus

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def run(examples) -> Run:
    return running_run(examples / "diabetes-progression", "p")


@pytest.fixture
def client(demo_user, run) -> Client:
    add_member(run.task.project, demo_user, "reviewer")  # decides, edits: the reviewer's role
    c = Client()
    c.force_login(demo_user)
    return c


def _proposal(run: Run, rule: bool, checks_pass: bool = True, n: int = 1) -> Proposal:
    wf = run.current_version.data
    child = {**wf, "note": f"child {n}", "hash": f"{n:064x}"}
    return Proposal(search="mimosa", n=n, key=child["hash"],
                    change=Change(kind="prompt_refinement", target="coder", rationale="r", author="mutator"),
                    rule_accepts=rule, rule="J improved" if rule else "J did not improve",
                    evidence=Evidence(basis="judge", J=0.8 if rule else 0.5, incumbent_J=0.7,
                                      checks=[Check(name="exit_ok", passed=True),
                                              Check(name="values_vary", passed=checks_pass)]),
                    parent=wf["hash"], workflow=child)


def _gate(run: Run, policy: str) -> DatabaseGate:
    Run.objects.filter(pk=run.pk).update(gate_policy=policy)
    run.refresh_from_db()
    return DatabaseGate(run, "L", moot_reason(run))


def _decided(d: Decision) -> tuple:
    return d.approved, d.decided_by, d.reason


def test_automatic_policy_follows_the_search_rule(run):
    gate = _gate(run, GatePolicy.AUTOMATIC)
    assert _decided(gate.decide(_proposal(run, rule=True, n=1)))[:2] == (True, "policy:automatic")
    assert _decided(gate.decide(_proposal(run, rule=False, n=2)))[:2] == (False, "policy:automatic")
    assert list(run.mutations.order_by("iteration").values_list("status", flat=True)) == ["auto_approved", "auto_rejected"]
    assert Run.objects.get(pk=run.pk).status == RunStatus.RUNNING  # nothing waited


def test_auto_improve_approves_only_an_improvement_with_every_check_passing(run):
    gate = _gate(run, GatePolicy.AUTO_IMPROVE)
    assert _decided(gate.decide(_proposal(run, rule=True, n=1)))[:2] == (True, "policy:auto_improve")
    # J improved but a public check failed: a person decides, and the run waits without a worker.
    with pytest.raises(AwaitingDecision):
        gate.decide(_proposal(run, rule=True, checks_pass=False, n=2))
    decide(Mutation.objects.get(iteration=2), MutationStatus.VETOED, "user:ada", "values constant")
    assert _decided(gate.decide(_proposal(run, rule=True, checks_pass=False, n=2))) == (False, "user:ada",
                                                                                        "values constant")


def test_manual_policy_suspends_the_run_until_a_person_decides(run):
    gate = _gate(run, GatePolicy.MANUAL)
    with pytest.raises(AwaitingDecision) as waiting:
        gate.decide(_proposal(run, rule=False))
    assert waiting.value.n == 1
    row = Mutation.objects.get(run=run, status=MutationStatus.PROPOSED)
    assert Run.objects.get(pk=run.pk).status == RunStatus.AWAITING
    assert row.gate.evidence.J == 0.5 and row.gate.change.kind == "prompt_refinement"
    # The rule rejects it, but a person has the final word; the resumed search asks again.
    decide(row, MutationStatus.APPROVED, "user:ada", "looks right")
    resumed = DatabaseGate(run, "L2", moot_reason(run))
    Run.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING, lease="L2")
    assert _decided(resumed.decide(_proposal(run, rule=False))) == (True, "user:ada", "looks right")
    assert run.mutations.count() == 1


def test_a_decision_made_before_a_worker_was_lost_stands_on_resume(run):
    gate = _gate(run, GatePolicy.MANUAL)
    row = Mutation.objects.create(run=run, iteration=1, kind="prompt_refinement", child_hash=f"{1:064x}",
                                  proposal=_proposal(run, rule=True).model_dump(mode="json"))
    decide(row, MutationStatus.VETOED, "user:ada", "no")
    assert _decided(gate.decide(_proposal(run, rule=True))) == (False, "user:ada", "no")
    assert run.mutations.count() == 1


def test_a_waiting_run_pauses_and_cancels_at_once(run):
    from webapp.runs import controls

    gate = _gate(run, GatePolicy.MANUAL)
    with pytest.raises(AwaitingDecision):
        gate.decide(_proposal(run, rule=True))
    controls.pause_run(Run.objects.get(pk=run.pk))
    assert Run.objects.get(pk=run.pk).status == RunStatus.PAUSED  # no worker to wait for
    # A decision taken while paused stands, and does not send the run back to the queue.
    row = Mutation.objects.get(run=run)
    decide(row, MutationStatus.APPROVED, "user:ada", "ok")
    assert not controls.after_decision(Run.objects.get(pk=run.pk))
    assert Run.objects.get(pk=run.pk).status == RunStatus.PAUSED
    controls.cancel_run(Run.objects.get(pk=run.pk))
    assert Run.objects.get(pk=run.pk).status == RunStatus.CANCELLED


def test_a_pause_or_a_lost_lease_stops_the_engine_at_its_next_step(run):
    from engine.errors import RunInterrupted
    from webapp.runs.bridge import RunControl

    control = RunControl(run, "L")
    control.check()  # running, and this attempt's lease: go on
    Run.objects.filter(pk=run.pk).update(status=RunStatus.PAUSING)
    with pytest.raises(RunInterrupted, match="paused"):
        control.check(force=True)
    Run.objects.filter(pk=run.pk).update(status=RunStatus.RUNNING, lease="other")
    with pytest.raises(RunInterrupted, match="lease lost"):
        control.check(force=True)


def test_approve_and_veto_buttons_record_who_and_why(run, client):
    row = proposed_mutation(run, key="a" * 64)
    page = client.post(f"/mutations/{row.pk}/veto", {"reason": "changes the evaluator's input"})
    assert page.status_code == 200 and b"vetoed by user:ada" in page.content
    row.refresh_from_db()
    assert (row.status, row.decided_by, row.reason) == ("vetoed", "user:ada", "changes the evaluator's input")
    # A second click cannot overturn it.
    client.post(f"/mutations/{row.pk}/approve")
    row.refresh_from_db()
    assert row.status == "vetoed"


def test_an_invalid_contract_type_is_refused_with_the_parsers_message(run, client):
    edge = run.current_version.data["edges"][0]
    page = client.post(f"/runs/{run.pk}/editor", {"kind": "contract", "contract": "list[",
                                                  "edge": f"{edge['source']}->{edge['target']}:{edge['artifact']}"})
    assert page.status_code == 422
    assert b"invalid contract type" in page.content and b"nothing changed" in page.content
    assert run.versions.count() == 1


def test_a_contract_that_contradicts_the_tasks_answer_is_refused(run, client):
    """Issue 37, item 12: the editor took csv[id:int, progression:str, extra:float] for the
    predictions of a regression task whose answer contract is progression:float."""
    edge = next(e for e in run.current_version.data["edges"] if e["artifact"] == "predictions")
    key = f"{edge['source']}->{edge['target']}:predictions"
    page = client.post(f"/runs/{run.pk}/editor", {"kind": "contract", "edge": key,
                                                  "contract": "csv[id:int, progression:str, extra:float]"})
    assert page.status_code == 422, page.content.decode()[-2000:]
    assert b"answer contract is csv[id:int, progression:float]" in page.content and b"nothing changed" in page.content
    assert run.versions.count() == 1
    # a contract that still satisfies the task (an extra column) is taken
    page = client.post(f"/runs/{run.pk}/editor", {"kind": "contract", "edge": key,
                                                  "contract": "csv[id:int, progression:float, extra:float]"})
    assert page.status_code == 200 and run.versions.count() == 2


def test_an_edge_that_makes_a_cycle_is_refused(run, client):
    # debugger -> finalizer (code) turned round to finalizer -> coder closes a loop through
    # coder -> debugger -> verifier -> finalizer.
    page = client.post(f"/runs/{run.pk}/editor", {
        "kind": "edge", "edge": "debugger->finalizer:code", "new_source": "finalizer", "new_target": "coder",
        "contract": "python"})
    assert page.status_code == 422
    assert b"form a cycle" in page.content and b"nothing changed" in page.content
    assert run.versions.count() == 1


def test_a_valid_procedure_edit_becomes_a_version_by_that_person(run, client):
    page = client.post(f"/runs/{run.pk}/editor", {"kind": "procedure", "role": "planner",
                                                  "procedure": "Prefer gradient boosting.", "note": "domain prior"})
    assert page.status_code == 200 and b"Saved as v2" in page.content
    v2 = run.versions.get(number=2)
    assert v2.author == "user:ada" and v2.parent.number == 1
    assert v2.data["harness"]["procedures"]["planner"] == "Prefer gradient boosting."
    assert not v2.adopted  # the running Mimosa search adopts it at its next iteration
    edit = DatabaseGate(run, "L", moot_reason(run)).human_edit(None)
    assert edit.workflow.hash == v2.hash and edit.author == "user:ada"


def test_an_edit_saved_before_an_approval_is_applied_again_on_top_of_what_was_approved(run, client):
    from engine.mutations import Mutation as Change_
    from engine.search.base import rebase_edit
    from engine.workflow import Workflow
    from webapp.runs.bridge import record_version

    v1 = run.versions.get(number=1)
    client.post(f"/runs/{run.pk}/editor", {"kind": "procedure", "role": "planner",
                                           "procedure": "Prefer gradient boosting.", "note": "domain prior"})
    gate = DatabaseGate(run, "L", moot_reason(run))
    edit = gate.human_edit(None)
    assert edit.change.target == "planner" and edit.base == v1.hash  # the change, and what it was written on
    # Meanwhile the search adopted a proposal a person approved (written on v1 too).
    approved = Change_("procedure_refinement", "coder", {"procedure": "Use splines."}, "r").apply(
        Workflow.from_dict({**v1.data, "hash": None}))
    v3 = record_version(run, approved.to_dict(), "user:ada", "approved proposal", 1)
    gate.adopted(rebase_edit(edit, approved), 2)
    v4 = run.versions.get(number=4)
    procedures = v4.data["harness"]["procedures"]
    assert procedures["planner"] == "Prefer gradient boosting." and procedures["coder"] == "Use splines."
    assert v4.parent == v3 and v4.author == "user:ada" and v4.adopted
    v2 = run.versions.get(number=2)
    assert v2.adopted and v2.outcome.startswith("applied again on top of v3 as v4")
    assert gate.human_edit(None) is None  # applied once
    assert "applied again on top of v3 as v4" in client.get(f"/runs/{run.pk}/timeline").content.decode()


def test_an_edit_that_no_longer_applies_shows_why_it_was_refused(run, client):
    client.post(f"/runs/{run.pk}/editor", {"kind": "procedure", "role": "planner",
                                           "procedure": "Prefer gradient boosting.", "note": "domain prior"})
    gate = DatabaseGate(run, "L", moot_reason(run))
    gate.refused(gate.human_edit(None), "it no longer applies to the current workflow: no role 'planner'")
    v2 = run.versions.get(number=2)
    assert not v2.adopted and v2.outcome == "refused: it no longer applies to the current workflow: no role 'planner'"
    assert gate.human_edit(None) is None
    timeline = client.get(f"/runs/{run.pk}/timeline").content.decode()
    assert "not adopted" in timeline and "no role &#x27;planner&#x27;" in timeline
    assert "waits for the next iteration" not in timeline


def test_a_decision_is_known_to_the_gate_without_waiting_and_only_once_made(run):
    gate = _gate(run, GatePolicy.MANUAL)
    proposal = _proposal(run, rule=True)
    assert gate.decision_made(proposal) is None
    with pytest.raises(AwaitingDecision):
        gate.decide(proposal)
    assert gate.decision_made(proposal) is None  # waiting is not decided
    decide(Mutation.objects.get(run=run), MutationStatus.APPROVED, "user:ada", "yes")
    assert _decided(gate.decision_made(proposal)) == (True, "user:ada", "yes")


def test_a_memory_policy_edit_is_validated_like_any_other_edit(run, client):
    editor = client.get(f"/runs/{run.pk}/editor").content.decode()
    assert 'id="memory-role"' in editor and "check_result" in editor  # the planner's current retrieval shown
    page = client.post(f"/runs/{run.pk}/editor", {"kind": "memory", "role": "planner", "records": "plan",
                                                  "retrieves": "check_result, note", "subscribes": "note",
                                                  "hints": "jump, outlier", "limit": "3", "note": "less to read"})
    assert page.status_code == 200 and b"Saved as v2" in page.content
    planner = run.versions.get(number=2).data["harness"]["memory"]["roles"]["planner"]
    assert planner == {"records": ["plan"], "retrieves": ["check_result", "note"], "hints": ["jump", "outlier"],
                       "limit": 3, "subscribes": ["note"]}
    for bad, says in (({"retrieves": "gossip"}, b"unknown record kind"), ({"limit": "-1"}, b"whole number"),
                      ({"role": "oracle"}, b"no role")):
        form = {"kind": "memory", "role": "planner", "records": "plan", "retrieves": "note", "subscribes": "",
                "hints": "", "limit": "3", **bad}
        page = client.post(f"/runs/{run.pk}/editor", form)
        assert page.status_code == 422 and says in page.content and b"nothing changed" in page.content
    assert run.versions.count() == 2


def _event(run: Run, seq: int, kind: str, agent: str, iteration: int, payload: dict) -> Event:
    return Event.objects.create(run=run, seq=seq, kind=kind, agent=agent, iteration=iteration, ts=1.0,
                                source="probe", payload=payload)


def test_trace_viewer_filters_and_pages_large_outputs(run, client):
    long = "".join(f"line {k}\n" for k in range(3000))
    pages = -(-len(long) // 4000)
    for i in range(120):
        _event(run, i + 1, "model_call" if i % 2 else "check", "coder" if i % 3 else "verifier", i // 40,
               {"response": "x" * 10 if i != 7 else long})
    page = client.get(f"/runs/{run.pk}/trace", {"kind": "model_call", "agent": "coder"}, HTTP_HX_REQUEST="true")
    rows = page.content.decode()
    assert "40 events" in rows and "<td>check</td>" not in rows and "<td>verifier</td>" not in rows
    assert client.get(f"/runs/{run.pk}/trace", {"iteration": "2"}, HTTP_HX_REQUEST="true").context["page"].paginator.count == 40
    detail = client.get(f"/runs/{run.pk}/events/8").content.decode()
    assert f"read all {len(long)} characters" in detail and "line 2999" not in detail
    last = client.get(f"/runs/{run.pk}/events/8", {"field": "response", "page": pages}).content.decode()
    assert f"page {pages} of {pages}" in last and "line 2999" in last and "line 0\n" not in last


def test_pages_need_a_signed_in_person(run):
    assert Client().get(f"/runs/{run.pk}/").status_code == 302
    health = Client().get("/healthz")  # no sign-in needed; 503 here, where no Redis or worker runs
    assert health.status_code in (200, 503) and {"database", "redis", "worker", "ok"} <= set(health.json())


def test_a_scimars_round_that_a_person_approved_becomes_a_version(run):
    from engine.trace import Tracer

    child = {**run.current_version.data, "note": "round 1"}
    child["harness"] = {**child["harness"], "procedures": {**child["harness"]["procedures"], "planner": "Be brief."}}
    from engine.workflow import Workflow

    child = Workflow.from_dict({**child, "hash": None}).to_dict()
    tracer = Tracer("search", [RunEventSink(run, "L")])
    tracer.emit("composition", None, n=1, gate="user:ada", approved=True, decision="adopt",
                workflow_hash=child["hash"], workflow=child)
    tracer.emit("composition", None, n=2, gate="user:ada", approved=False, decision="keep",
                workflow_hash=child["hash"], workflow=None)
    assert list(run.versions.values_list("number", "author")) == [(1, "engine"), (2, "user:ada")]
    assert run.events.filter(kind="composition").count() == 2


def test_a_finished_runs_page_shows_the_trivial_baselines_beside_the_team(run, client):
    run.result = {"initial": {"workflow_hash": "a" * 64, "J": 0.7, "validation": 0.4,
                              "official": {"ok": True, "value": 0.41}},
                  "final": {"workflow_hash": "a" * 64, "J": 0.7, "validation": 0.4,
                            "official": {"ok": True, "value": 0.41}},
                  "baselines": {"constant": {"ok": True, "value": 0.0031},
                                "nearest_neighbour": {"ok": True, "value": 0.2201}},
                  "gaps": {"constant": {"baseline": "constant", "difference": 0.4069, "low": 0.31, "high": 0.52,
                                        "rows": 88, "resamples": 2000, "scorer": "the engine's r2", "verdict": "better"},
                           "nearest_neighbour": {"baseline": "nearest_neighbour", "difference": 0.1899, "low": -0.02,
                                                 "high": 0.37, "rows": 88, "resamples": 2000,
                                                 "scorer": "the engine's r2", "verdict": "within noise"}}}
    run.save()
    page = client.get(f"/runs/{run.pk}/header").content.decode()
    assert "baseline: constant" in page and "0.0031" in page
    assert "baseline: nearest neighbour" in page and "0.2201" in page
    # the final team's lead over each, with its interval and whether it is beyond the test set's noise
    assert "final team&#x27;s lead, 95 % interval" in page or "final team's lead, 95 % interval" in page
    assert re.search(r'class="gap agree">0.4069 <span class="muted">\[0.3100, 0.5200\]</span> better', page), page
    assert re.search(r'class="gap ">0.1899 <span class="muted">\[-0.0200, 0.3700\]</span> within noise', page), page
    assert "paired bootstrap, 2000 resamples of the 88 held-out rows" in page


def test_a_finished_runs_page_says_the_search_handed_in_a_baseline(run, client):
    """Issue 27 item 5a: the final row is the baseline that beat every candidate on the search's
    folds; what the search itself found is shown beside it, and the sentence that says why."""
    verdict = ("found nothing better than the constant baseline: on the search's own validation folds it scores "
               "r2 -0.0455, every one of the 2 validated candidate(s) worse (the best -4.432; higher is better); "
               "handed in the constant baseline's predictions instead")
    run.result = {"final": {"workflow_hash": "b" * 64, "J": None, "validation": -0.0455, "baseline": "constant",
                            "verdict": verdict, "official": {"ok": True, "value": -0.0032},
                            "searched": {"workflow_hash": "b" * 64, "J": 0.708, "validation": -4.432,
                                         "official": {"ok": True, "value": -3.6459}}},
                  "baselines": {"constant": {"ok": True, "value": -0.0032}}}
    run.save()
    page = client.get(f"/runs/{run.pk}/header").content.decode()
    assert "searched (not handed in)" in page and "-3.6459" in page
    assert "found nothing better than the constant baseline" in html.unescape(page)
    # the report a person sends round says it too
    report = html.unescape(client.get(f"/runs/{run.pk}/report.html").content.decode())
    assert "final (the constant baseline, handed in)" in report
    assert re.search(r'id="metric-searched"><th>searched \(not handed in\)</th><td class="num">0.708</td>'
                     r'<td class="num">-3.6459</td>', report), report
    assert "The final: found nothing better than the constant baseline" in report


def test_a_finished_runs_page_shows_the_single_agent_and_the_hindsight(run, client):
    run.result = {"final": {"workflow_hash": "a" * 64, "J": 0.7, "validation": 0.4, "official": {"ok": True, "value": 0.41}},
                  "baselines": {"single_agent": {"ok": True, "value": 0.3877}},
                  "hindsight": {"higher_is_better": True, "candidates": [{"label": "001-initial"}] * 4, "correlations": [
                      {"a": "J", "b": "validation", "n": 4, "rho": 0.8, "p": 0.2, "why": ""},
                      {"a": "J", "b": "official", "n": 4, "rho": -0.4, "p": 0.6, "why": ""},
                      {"a": "validation", "b": "official", "n": 1, "rho": None, "p": None,
                       "why": "1 candidate(s) with both; needs 3"}]}}
    run.save()
    page = client.get(f"/runs/{run.pk}/header").content.decode()
    assert "baseline: single agent" in page and "0.3877" in page and "same budget" in page
    assert "4 probed candidates" in page
    assert 'class="agree">0.80' in page and 'class="disagree">-0.40' in page
    assert "n/a: 1 candidate(s) with both; needs 3" in page


def test_an_executions_artifacts_can_be_opened_and_annotated_from_its_event(run, client):
    sha = "ab" * 32
    _event(run, 1, "code_execution", "verifier", 1, {"purpose": "candidate solution", "files": {"predictions.csv": sha},
                                                     "status": "ok", "exit_code": 0, "stdout_tail": "", "stderr_tail": "",
                                                     "duration_s": 1.0, "violations": [], "executor": "subprocess",
                                                     "stdout": "", "stderr": "", "workdir": "."})
    detail = client.get(f"/runs/{run.pk}/events/1").content.decode()
    assert f"/runs/{run.pk}/artifacts/{sha}" in detail
    assert f"target_kind=artifact&target_ref={sha}" in detail and "Artifact predictions.csv" in detail
    listing = client.get(f"/runs/{run.pk}/annotations", {"target_kind": "artifact", "target_ref": sha})
    assert listing.status_code == 200 and b"Annotations of this artifact" in listing.content


def test_the_trace_page_counts_and_choices_follow_new_events(run, client):
    for i in range(3):
        _event(run, i + 1, "check", "verifier", 0, {})
    Run.objects.filter(pk=run.pk).update(last_seq=3)
    page = client.get(f"/runs/{run.pk}/trace")
    assert page.context["page"].paginator.count == 3 and page.context["kinds"] == ["check"]
    # what the bridge does for each event: the row, then the run's last number
    _event(run, 4, "route", "router7", 1, {})
    Run.objects.filter(pk=run.pk).update(last_seq=4)
    page = client.get(f"/runs/{run.pk}/trace")
    assert page.context["page"].paginator.count == 4
    assert page.context["kinds"] == ["check", "route"] and "router7" in page.context["agents"]
    assert client.get(f"/runs/{run.pk}/trace", {"kind": "route"}).context["page"].paginator.count == 1
