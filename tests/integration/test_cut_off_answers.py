"""Issue 37, item 14, against an OpenAI-compatible stand-in (tests/fake_openai.py): an answer cut off
by its length was used when it still parsed (a planner's answer cut at 4,096 tokens became the
plan, marked SUCCESS), and a server that ignored max_tokens (a 5 MB answer) overran the run's
budget 6x and wrote 5 MB into the trace. Every cut-off answer is now re-asked, and what is read
and counted of an answer is capped by the room it was given."""
from __future__ import annotations

import json

from engine.answers import PLAN, ask
from engine.budget import Budget
from engine.gateway import MAX_CHARS_PER_TOKEN, ModelGateway
from engine.models import ModelSettings
from engine.trace import ListSink, Tracer
from tests.fake_openai import answer, fake_openai

ASK = [{"role": "user", "content": "Plan the analysis."}]
WHOLE_PLAN = "1. Profile the data.\n2. Fit a ridge model.\nstrategy: ridge {\"alpha\": 1.0}\n"


def _gateway(server, sink, budget=None, **options) -> ModelGateway:
    return ModelGateway(budget or Budget(), Tracer("t", [sink]),
                        models=ModelSettings.of("openai/fake", api_base=server.base_url, **options))


def test_a_cut_off_plan_that_still_parses_is_reasked_not_used():
    cut = "1. Profile the data.\nstrategy: ridge {\"alpha\": 1.0}\n2. Then check the residuals and"
    with fake_openai([answer(cut, finish_reason="length"), answer(WHOLE_PLAN)]) as server:
        sink = ListSink()
        got = ask(_gateway(server, sink), "planner", "planner", ASK, PLAN)
    assert len(server.requests) == 2, "the cut-off plan was used as if whole"
    assert got.ok and got.reasked and got.text == WHOLE_PLAN
    first = next(e for e in sink.events if e.kind == "answer_reasked")
    assert "cut off at its limit" in first.payload["problem"]


def test_a_plan_cut_off_twice_is_unusable_with_the_reason():
    cut = "strategy: ridge {\"alpha\": 1.0}\n1. Profile"
    with fake_openai([answer(cut, finish_reason="length"), answer(cut, finish_reason="length")]) as server:
        got = ask(_gateway(server, ListSink()), "planner", "planner", ASK, PLAN)
    assert not got.ok and "cut off" in got.problem and len(server.requests) == 2


def test_a_server_that_ignores_max_tokens_is_cut_and_charged_the_room_only():
    huge = "strategy: ridge {}\n" + "blah " * 1_000_000  # 5 MB, and it says so in its usage
    budget = Budget(max_tokens=60_000)
    with fake_openai([answer(huge, usage={"prompt_tokens": 20, "completion_tokens": 1_250_000,
                                          "total_tokens": 1_250_020}),
                      answer(WHOLE_PLAN)]) as server:
        sink = ListSink()
        got = ask(_gateway(server, sink, budget=budget, max_answer_tokens=1000), "planner", "planner", ASK, PLAN)
    calls = [e for e in sink.events if e.kind == "model_call"]
    assert len(calls[0].payload["response"]) <= 1000 * MAX_CHARS_PER_TOKEN
    assert calls[0].payload["completion_tokens"] <= 1000 and calls[0].payload["finish_reason"] == "length"
    assert budget.used.tokens <= 60_000 and got.reasked and got.ok
    assert len(json.dumps([e.payload for e in sink.events])) < 200_000  # the trace holds no 5 MB answer
