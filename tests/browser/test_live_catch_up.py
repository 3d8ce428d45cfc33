"""Issue 15's done-when, in a real browser (Playwright + Debian's Chromium against the running
studio: Daphne, embedded Redis): three viewers watch one run; the third one's WebSocket loses
messages on the way (Playwright sits between the page and the server and drops frames: a probe's
graph, a judgement, a proposal, and then everything but the server's syncs to the end, the last
messages included). Its page notices each gap, says "catching up…", fetches what it missed (a
gap's events from its socket, a studio message's effect and the lost tail from the studio's
pages and events.json), and all three show the same final DAG, queue, scores and header. The run's events go through the
worker's own sink (RunEventSink) from this test, so the test takes seconds, not a run's minutes.
Screenshots land in test-artifacts/screenshots/."""
from __future__ import annotations

import re
import time

import pytest
from playwright.sync_api import expect

from engine.protocol.events import AgentFinished, AgentStarted, Judgement, ModelCall, RunStarted
from engine.trace import Event as EngineEvent
from tests.browser.conftest import SHOTS
from tests.studio_harness import add_member, running_run, wait_for
from webapp.runs import bridge, live
from webapp.runs.models import MutationStatus, Run, RunStatus

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# What a page shows, read the same way on each: agent states and the graph's label, the queue,
# the J chart's series, the header, the budget.
STATE_JS = """() => ({
  dag: [...document.querySelectorAll('#dag-states li')].map((li) => li.textContent).sort(),
  label: document.getElementById('dag-label').textContent,
  queue: [...document.querySelectorAll('#queue article.mutation')].map((a) => a.id + ' ' + a.className + ' '
           + a.innerText.replace(/\\s+/g, ' ').trim()),
  scores: (document.getElementById('chart-j').data || []).map((t) => [t.name, t.x, t.y]),
  header: document.getElementById('run-header').innerText.replace(/\\s+/g, ' ').trim(),
  budget: (document.getElementById('budget') || {}).textContent || '',
})"""


def shot(page, step: str, full_page: bool = False) -> None:
    page.screenshot(path=SHOTS / f"test_three_viewers_one_losing_messages-{step}.png", full_page=full_page)


class Script:
    """A probe's events as the engine emits them, through the worker's sink."""

    def __init__(self, run: Run, page):
        self.run = run
        self.page = page  # waits through it, so that Playwright passes frames on meanwhile
        self.sink = bridge.RunEventSink(run, run.lease)
        self.workflow = run.current_version.data
        self.agents = [a["id"] for a in self.workflow["agents"]]
        self.n = 0

    def emit(self, kind: str, payload, agent: str | None = None, iteration: int = 0, source: str = "probe-0") -> None:
        self.n += 1
        self.sink.emit(EngineEvent(source, self.n, time.time(), kind, agent, iteration, payload.to_payload()))
        self.page.wait_for_timeout(30)  # one at a time, as agents act

    def probe(self, iteration: int, workflow_hash: str, J: float, fail: str | None = None) -> None:
        source = f"probe-{iteration}"
        self.emit("run_started", RunStarted(task="t", task_title="T", task_fingerprint="f", workflow=self.workflow,
                                            workflow_hash=workflow_hash, seed=0, executor="subprocess", budget={},
                                            order=self.agents), iteration=iteration, source=source)
        for agent in self.agents:
            self.emit("agent_started", AgentStarted(roles=[agent], inputs=[]), agent, iteration, source)
            self.emit("model_call", ModelCall(role=agent, purpose=f"{agent} works", model="offline", provider="offline",
                                              messages=[], response="", prompt_tokens=90, completion_tokens=10,
                                              cost_usd=0.0, duration_s=0.1, cached=False, request_key="k" * 64,
                                              budget_used={"calls": self.n, "prompt_tokens": 90 * self.n,
                                                           "completion_tokens": 10 * self.n, "tokens": 100 * self.n,
                                                           "cost_usd": 0.0},
                                              budget_remaining={"tokens": 100_000}), agent, iteration, source)
            status = "FAILURE" if agent == fail else "SUCCESS"
            self.emit("agent_finished", AgentFinished(status=status, message="", outputs={}), agent, iteration, source)
        self.emit("judgement", Judgement(iteration_n=iteration, workflow_hash=workflow_hash, ok=True, J=J,
                                         scores={"goal_alignment": J, "output_quality": J - 0.1}, checks=[]),
                  "judge", iteration, source)


def test_three_viewers_one_losing_messages_end_with_the_same_dag_queue_and_scores(page, light_task, studio):
    run = running_run(light_task, "Live catch-up")
    add_member(run.task.project, "ada", "reviewer")
    viewers = [page, page.context.new_page(), page.context.new_page()]
    lossy = viewers[2]
    errors = []
    lossy.on("pageerror", lambda error: errors.append(error))

    # The third page's socket goes through Playwright, which drops what the test says.
    dropping = {"kinds": ("run_started", "judgement", "mutation_pending"), "all": False}
    dropped: list[str] = []

    def lose_some(ws) -> None:
        server = ws.connect_to_server()

        def from_server(message) -> None:
            text = message if isinstance(message, str) else message.decode()
            # the server's syncs and its answers to the page's own questions get through
            answer = text.startswith(('{"kind": "sync"', '{"kind": "missed"'))
            if not answer and (dropping["all"] or any(f'"kind": "{k}"' in text for k in dropping["kinds"])):
                dropped.append(text)
                return
            ws.send(message)
        server.on_message(from_server)

    lossy.route_web_socket(re.compile(r".*/ws/runs/\d+/.*"), lose_some)
    for viewer in viewers:
        viewer.goto(f"/runs/{run.pk}/")
        expect(viewer.locator("#ws-state")).to_have_text("live")

    try:
        _watch(run, viewers, lossy, dropping, dropped)
    finally:  # a run left going would be cancelled by the page fixture: it has no worker to stop it
        Run.objects.filter(pk=run.pk).update(status=RunStatus.COMPLETED)
    assert not errors


def _watch(run: Run, viewers, lossy, dropping: dict, dropped: list) -> None:
    from tests.studio_harness import proposed_mutation

    script = Script(run, viewers[0])
    script.probe(0, run.current_version.hash, 0.62)
    dropping["kinds"] = ("judgement", "mutation_pending")  # the second probe's graph gets through
    script.probe(1, "c" * 64, 0.71, fail=script.agents[-1])
    row = proposed_mutation(run, n=1)
    bridge.broadcast(run, live.mutation_message("mutation_pending", row.pk, iteration=1))
    # no studio message follows it: the next sync (a few seconds) shows the gap
    expect(lossy.locator(f"#mutation-{row.pk}")).to_have_count(1, timeout=15_000)
    assert int(lossy.locator("#run").get_attribute("data-catch-ups")) >= 2
    shot(lossy, "lossy-mid-run")

    # From here on the lossy page gets nothing but syncs: the decision, a new version, a third
    # probe and the run's end never reach it live.
    dropping["all"] = True
    bridge.decide(row, MutationStatus.APPROVED, "user:ada", "clearer procedure")
    bridge.record_version(run, {**script.workflow, "hash": "c" * 64}, "user:ada", "approved", 1)
    script.probe(2, "c" * 64, 0.8)
    Run.objects.filter(pk=run.pk).update(status=RunStatus.COMPLETED)
    bridge.broadcast(run, live.status_message(RunStatus.COMPLETED))

    expect(viewers[0].locator("#run-header")).to_contain_text("completed")
    # the charts redraw a moment after their last point
    wait_for(lambda: len(viewers[0].evaluate(STATE_JS)["scores"][0][2]) == 3, 10, what="the third point drawn")
    seen = viewers[0].evaluate(STATE_JS)
    wait_for(lambda: viewers[1].evaluate(STATE_JS) == seen, 10, what="the two other viewers to agree")
    # The lossy page learns of what it missed from the next syncs (a few seconds) and catches up.
    try:
        final = wait_for(lambda: lossy.evaluate(STATE_JS) == seen and lossy.evaluate(STATE_JS), 30, interval=0.5,
                         what="the page that lost messages to show what the others show")
    except AssertionError:
        other = lossy.evaluate(STATE_JS)
        raise AssertionError(f"still differs: { {k: (seen[k], other[k]) for k in seen if seen[k] != other[k]} }")
    expect(lossy.locator("#ws-state")).to_have_text("live")
    assert len(dropped) > 20  # it really missed a lot
    assert final["scores"][0][2] == [0.62, 0.71, 0.8]       # J of each probe, none twice
    assert "done" in " ".join(final["dag"]) and "v2" in final["label"]
    assert any("approved" in entry for entry in final["queue"])
    for n, viewer in enumerate(viewers):  # the DAG, the queue and the start of the scores
        viewer.evaluate("window.scrollTo(0, 0)")
        shot(viewer, f"viewer-{n + 1}")
