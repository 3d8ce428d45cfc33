"""The typed event protocol (engine/protocol/events.py): every payload model refuses what it does
not know and survives a trip through JSON, and every event the engine really emits, in a plain
run and in each search, matches its kind's model."""
from __future__ import annotations

import functools
import json
import sys
import types
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import pytest
from pydantic import BaseModel

import engine.archive
import engine.search.tree
from engine.budget import Budget
from engine.errors import ModelUnavailable
from engine.evolve import evolve
from engine.run_spec import RunSpec
from engine.protocol import (EVENT_KINDS, PAYLOADS, TREE_PHASES, Check, EditorProbe, Judgement, PayloadError,
                             SearchStep, TreeChildAbandoned, parse_payload)
from engine.artifacts import ArtifactStore
from engine.runner import RunConfig, run_workflow
from engine.search.probe import ProbeRunner
from engine.search.scimars import ReuseCache
from engine.search.tree import TreeConfig
from engine.synthesis import team_workflow
from engine.task import load_task
from engine.trace import Event, JsonlTraceSink, ListSink, Tracer, read_events
from engine.library.retrieval import Similarity
from engine.library.store import load_library
from engine.synthesis.stages import synthesize
from tests.fakes import FakeExecutor, Outcome, fail_first, traceback_of

ROOT = Path(__file__).resolve().parents[2]
DISC = ROOT / "examples" / "discontinuous-1d"
DIABETES = ROOT / "examples" / "diabetes-progression"


# --- a filled-in instance of every model, built from its field types ---------------------------
def _value(annotation: Any) -> Any:
    origin, args = get_origin(annotation), get_args(annotation)
    if annotation is Any:
        return {"any": [1, "x"]}
    if origin is Literal:
        return args[-1]
    if origin in (Union, types.UnionType):
        return _value(next(a for a in args if a is not type(None)))
    if origin is list:
        return [_value(args[0])] if args else [{"x": 1}]
    if origin is dict:
        return {"key": _value(args[1])} if args else {"x": 1}
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _filled(annotation)
    return {str: "text", int: 3, float: 0.25, bool: True, dict: {"x": 1}, list: [1]}[annotation]


def _filled(model: type[BaseModel]) -> dict:
    """Every field set, optional ones included, so each one's type makes the JSON round trip."""
    return {name: _value(field.annotation) for name, field in model.model_fields.items()}


# every payload model: one per kind, or one per shape of a kind (search_iteration)
MODELS = [model for models in PAYLOADS.values() for model in models]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_every_model_refuses_an_unknown_field_naming_kind_and_field(model):
    with pytest.raises(PayloadError, match=rf"'{model.kind}'.*surprise"):
        parse_payload(model.kind, {**_filled(model), "surprise": 1})


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_every_model_round_trips_through_json(model):
    kind = model.kind
    payload = parse_payload(kind, _filled(model))
    assert type(payload) is model and payload.kind == kind
    stored = json.loads(json.dumps(payload.to_payload()))  # what a trace file holds
    assert set(stored) == set(model.model_fields)
    assert parse_payload(kind, stored) == payload
    assert model.model_validate_json(payload.model_dump_json()) == payload


def test_registry_is_the_event_kinds_in_emission_order():
    assert EVENT_KINDS == tuple(PAYLOADS) and len(set(EVENT_KINDS)) == len(EVENT_KINDS)
    assert EVENT_KINDS[0] == "run_started" and EVENT_KINDS.index("run_finished") < EVENT_KINDS.index("search_started")
    assert all(model.kind == kind for kind, models in PAYLOADS.items() for model in models)
    import engine.trace
    assert engine.trace.EVENT_KINDS is EVENT_KINDS


def test_an_unknown_kind_or_a_missing_field_is_refused():
    with pytest.raises(PayloadError, match="unknown event kind 'no_such_kind'"):
        parse_payload("no_such_kind", {})
    with pytest.raises(PayloadError, match="'check'.*name.*required"):
        parse_payload("check", {"passed": True})
    # one kind, several shapes: each read as its own, with its own required fields
    with pytest.raises(PayloadError, match="'search_iteration'.*winner.*required"):
        parse_payload("search_iteration", {"phase": "vote", "slot": 0, "votes": [], "tally": {}, "fallback": True})
    with pytest.raises(PayloadError, match="'search_iteration'.*accepted.*required"):
        parse_payload("search_iteration", {"search": "mimosa", "n": 1, "workflow_hash": "h", "budget_left": {}})


def test_a_stored_payload_is_read_back_typed_with_what_an_older_trellis_wrote_left_out():
    from engine.protocol import EditorProbe, SearchStep, TreeVote, read_payload
    step = read_payload("search_iteration", {"search": "mimosa", "n": 2, "accepted": True, "workflow_hash": "h",
                                             "budget_left": {"tokens": 5}, "J": 0.5, "retired_field": 1})
    assert isinstance(step, SearchStep) and step.J == 0.5 and step.budget_left.tokens == 5
    assert isinstance(read_payload("search_iteration", _filled(TreeVote)), TreeVote)
    assert isinstance(read_payload("search_iteration", _filled(EditorProbe)), EditorProbe)
    with pytest.raises(PayloadError, match="workflow_hash"):
        read_payload("search_iteration", {"search": "mimosa", "n": 2, "accepted": True, "budget_left": {}})
    event = Event("r", 1, 0.0, "check", "verifier", 0, {"name": "finite", "passed": False, "detail": "NaN"})
    assert event.data == Check(name="finite", passed=False, detail="NaN")


def test_emit_validates_the_legacy_form_and_stores_what_the_typed_form_stores():
    sink = ListSink()
    tracer = Tracer("t", [sink])
    with pytest.raises(ValueError, match="'check'.*pased"):
        tracer.emit("check", "verifier", name="exit_ok", pased=True)  # a typo fails where it is made
    with pytest.raises(ValueError, match="unknown event kind"):
        tracer.emit("chek", "verifier", name="exit_ok", passed=True)
    with pytest.raises(TypeError, match="no other fields"):
        tracer.emit(Check(name="exit_ok", passed=True), "verifier", detail="x")
    assert sink.events == [] and tracer._seq == 0  # nothing refused was numbered or written

    legacy = tracer.emit("check", "verifier", name="exit_ok", passed=True, detail="status ok")
    typed = tracer.emit(Check(name="exit_ok", passed=True, detail="status ok"), agent="verifier")
    assert (legacy.kind, legacy.agent, legacy.payload) == (typed.kind, typed.agent, typed.payload)
    assert [e.seq for e in sink.events] == [1, 2]
    # only the fields an emitter set are stored, None ones included: readers see the same keys
    judged = tracer.emit(Judgement(iteration_n=1, workflow_hash="h", ok=False, error="not judged",
                                   checks=[], validation=None), agent="judge")
    assert judged.payload == {"iteration_n": 1, "workflow_hash": "h", "ok": False, "error": "not judged",
                              "checks": [], "validation": None}


def test_reading_a_trace_never_validates(tmp_path):
    """Old trace files may hold kinds and fields the models no longer know; they still read."""
    path = tmp_path / "trace.jsonl"
    old = {"run_id": "r", "seq": 1, "ts": 1.0, "kind": "retired_kind", "agent": None, "iteration": 0,
           "payload": {"whatever": [1, 2]}}
    path.write_text(json.dumps(old) + "\n" + json.dumps({**old, "seq": 2, "kind": "check",
                                                          "payload": {"name": "x", "extra": 1}}) + "\n")
    events = list(read_events(path))
    assert [e.kind for e in events] == ["retired_kind", "check"]
    assert events[1].payload == {"name": "x", "extra": 1} and Event.from_dict(old).payload == old["payload"]


# --- every event real engine flows emit matches its model ----------------------------------------
class _Embedder:
    """Stands in for all-MiniLM-L6-v2 (the archive only needs some vector per task)."""

    name = "protocol-test"

    def embed(self, text: str) -> list[float]:
        return [1.0, float(len(text) % 7), 0.5]


def _bug_once() -> FakeExecutor:
    """A sandbox whose first candidate solution crashes, so the verifier routes to the debugger."""
    crash = Outcome("error", stderr=traceback_of("NameError: name 'modle' is not defined"))
    return FakeExecutor(script=fail_first("predictions", crash))


# Kinds only a fault produces, each covered by a targeted flow below.
FAULT_KINDS = {"run_failed": "a model that cannot be called", "search_failed": "the same, inside a search",
               "budget_exhausted": "a one-call budget"}


def _reuse_twice(task, root: Path, tracer: Tracer) -> None:
    """SciMARS reuses a probe only when a round meets the same harness twice: probe one twice
    (reused), then once more after its saved predictions changed (run again)."""
    cache = ReuseCache(ProbeRunner(task, Budget(), root, executor=FakeExecutor(root / "sandbox")), tracer)
    workflow = team_workflow(task)
    first, _ = cache.probe(workflow, "reference", 1)
    cache.probe(workflow.derive(note="same content"), "again", 1)
    saved = ArtifactStore(first.run_dir / "artifacts").path_for(first.result.predictions_sha256)
    saved.write_text(saved.read_text() + "999,0.0\n")
    cache.probe(workflow, "after-change", 1)


def _train_once(root: Path, tracer: Tracer) -> None:
    """A training job: a program importing trellis_train that left a curve point and a checkpoint."""
    from engine.sandbox import ExecutionRequest
    from engine.training.jobs import TrainingExecutor, tracing_to

    left = (("training/metrics.jsonl", '{"epoch": 0, "epochs": 1, "loss": 0.5, "val": 0.6, "lr": 0.1}\n'
                                       '{"checkpoint": "model.pt", "epoch": 0}\n'),
            ("training/checkpoints/model.pt", "weights"))
    executor = FakeExecutor(root / "job-sandbox", script={"trellis_train": Outcome("ok", files=left)})
    with tracing_to(tracer):
        TrainingExecutor(executor, root / "training", device="cpu").run(ExecutionRequest(code="import trellis_train\n"))


@pytest.fixture(scope="module")
def emitted(tmp_path_factory) -> list[Event]:
    """Every event of a plain run, of one short search of each kind, and of the fault flows."""
    tmp = tmp_path_factory.mktemp("protocol")
    sink = ListSink()
    disc = load_task(DISC)
    quiet = open(tmp / "out.log", "w")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(engine.archive, "TaskEmbedder", _Embedder)
        # two children per node and one voter: in two iterations the tree votes and retires its root
        mp.setattr(engine.search.tree, "TreeConfig", functools.partial(
            TreeConfig, extra_parents=1, selectors=1, debate_rounds=1, max_children=2))
        run_workflow(disc, team_workflow(disc), RunConfig(run_dir=tmp / "run", seed=3), executor=_bug_once(),
                     sinks=[sink])
        # Mimosa's team has an MCP tool whose server answers once and crashes on the next call:
        # discovery, a call, its result and its error (the other searches start no server)
        mcp = tmp / "mcp.json"
        mcp.write_text(json.dumps({"servers": [{"name": "flaky", "command": sys.executable, "args": [
            str(Path(__file__).resolve().parents[1] / "mcp_flaky_server.py"), "2"], "allocate": {"analyzer": ["summarize"]}}]}))
        for search, task, iterations in (("mimosa", DISC, 1), ("scimars", DIABETES, 1), ("tree", DISC, 2)):
            mp.setenv("TRELLIS_MCP_CONFIG", str(mcp) if search == "mimosa" else "none")
            evolve(task,
                   RunSpec(search=search, iterations=iterations, seed=1, max_tokens=2_000_000,
                           memory=search == "scimars"),
                   run_dir=tmp / search, out=quiet, archive_dir=tmp / "archive", sinks=[sink],
                   executor=FakeExecutor(tmp / f"{search}-sandbox"))
        # AgentCo-op: synthesis's stages (the review's events are tests/unit/test_synthesis.py's)
        synthesize(load_task(DIABETES), load_library(tmp / "library"), Similarity(_Embedder()), Tracer("synthesis", [sink]))
        _reuse_twice(load_task(DIABETES), tmp / "reuse", Tracer("reuse", [sink]))
        _train_once(tmp, Tracer("training", [sink]))
        # faults
        run_workflow(disc, team_workflow(disc), RunConfig(run_dir=tmp / "tiny", budget=Budget(max_calls=1)),
                     executor=FakeExecutor(), sinks=[sink])
        with pytest.raises(ModelUnavailable):
            evolve(DISC, RunSpec(search="mimosa", iterations=1, model="nosuchprovider/x"), run_dir=tmp / "unavailable",
                   out=quiet, sinks=[sink], executor=FakeExecutor())
        _reask_once(Tracer("reask", [sink]))
    return sink.events


def _reask_once(tracer: Tracer) -> None:
    """A model on an OpenAI-compatible server that answers prose where code was asked: re-asked once."""
    from engine.answers import CODE, ask
    from engine.gateway import ModelGateway
    from engine.models import ModelSettings
    from tests.fake_openai import answer, fake_openai

    with fake_openai([answer("I would fit a spline."), answer("```python\nprint(1)\n```")]) as server:
        gateway = ModelGateway(Budget(), tracer, models=ModelSettings.of("openai/fake", api_base=server.base_url))
        assert ask(gateway, "coder", "coder", [{"role": "user", "content": "write code"}], CODE).ok


@pytest.mark.slow
def test_every_emitted_event_matches_its_model_and_every_kind_is_emitted(emitted):
    for event in emitted:
        payload = parse_payload(event.kind, event.payload)
        assert payload.to_payload() == event.payload, event.kind  # stored as emitted, nothing added
    seen = {e.kind for e in emitted}
    assert set(EVENT_KINDS) - seen == set(), f"never emitted: {sorted(set(EVENT_KINDS) - seen)}"
    shapes = {type(e.data) for e in emitted}  # each shape of a kind, read back as its own class
    assert set(MODELS) - shapes <= {TreeChildAbandoned}, sorted(m.__name__ for m in set(MODELS) - shapes)
    assert FAULT_KINDS.keys() <= seen


@pytest.mark.slow
def test_each_shape_of_a_many_shaped_kind_is_seen_and_validated(emitted):
    def of(kind: str) -> list:
        return [parse_payload(e.kind, e.payload) for e in emitted if e.kind == kind]

    iterations = of("search_iteration")
    assert {p.search for p in iterations if isinstance(p, (SearchStep, EditorProbe))} == {"mimosa", "scimars"}
    assert {"vote", "started", "finished"} <= {p.phase for p in iterations if isinstance(p, TREE_PHASES)}
    assert all(isinstance(p, (SearchStep, EditorProbe, *TREE_PHASES)) for p in iterations)
    assert {r.verified for r in of("reuse_receipt")} == {True, False}  # reused, and run again
    assert {r.taken for r in of("route")} >= {True}  # the crashed draft went to the debugger


@pytest.mark.slow
def test_the_trace_file_holds_the_same_validated_payloads(emitted, tmp_path):
    """A JSONL trace written by a tracer reads back to payloads its models accept unchanged."""
    tracer = Tracer("copy", [JsonlTraceSink(tmp_path / "trace.jsonl")])
    for event in emitted:
        tracer.emit(event.kind, event.agent, **event.payload)
    tracer.close()
    back = list(read_events(tmp_path / "trace.jsonl"))
    assert [(e.kind, e.payload) for e in back] == [(e.kind, json.loads(json.dumps(e.payload))) for e in emitted]
