"""A real model's bad answers (issue 25): each one that once made a run deliver nothing, replayed
by an OpenAI-compatible server (tests/fake_openai.py) through litellm's real HTTP path."""
from __future__ import annotations

import pytest

import engine.gateway
from engine.answers import CODE, ask
from engine.budget import Budget
from engine.errors import ModelCallError, ModelUnavailable
from engine.gateway import ModelGateway
from engine.models import ModelSettings, ModelSettingsError
from engine.prompt_format import extract_code, extract_status, extract_strategy, role_of
from engine.runner import RunConfig, run_workflow
from engine.synthesis import team_workflow
from engine.task import load_task
from engine.trace import ListSink, Tracer
from tests.fake_openai import (answer, context_length_exceeded, delayed, fake_openai, not_json, rate_limited,
                               refusal, server_error, truncated)

ASK = [{"role": "user", "content": "Write the program."}]
PROGRAM = ("import numpy as np, pandas as pd\n"
           "train = pd.read_csv('data/train.csv'); test = pd.read_csv('data/test_features.csv')\n"
           "coef = np.polyfit(train.x, train.y, 3)\n"
           "print('validation_relative_l2:', 0.5)\n"
           "pd.DataFrame({'id': test.id, 'y': np.polyval(coef, test.x)}).to_csv('predictions.csv', index=False)\n")


def _gateway(server, sink=None, **options) -> ModelGateway:
    return ModelGateway(Budget(), Tracer("t", [sink or ListSink()]),
                        models=ModelSettings.of("openai/fake", api_base=server.base_url, **options))


# --- the readers: what real models write ------------------------------------------------------------
@pytest.mark.parametrize("text", [
    "```Python\nprint(1)\n```", "```python3\nprint(1)\n```", "~~~\nprint(1)\n~~~", "~~~py\nprint(1)\n~~~",
    "Here is the script:\nimport math\nprint(math.pi)\n", "```\nprint(1)\n```",
])
def test_any_fence_language_tag_or_no_fence_reads_as_code(text):
    assert extract_code(text) and "print(" in extract_code(text)


@pytest.mark.parametrize("text,status", [("**STATUS:** SUCCESS", "SUCCESS"), ("- **Status**: retry", "RETRY"),
                                         ("## STATUS: FAILURE", "FAILURE"), ("`STATUS: SUCCESS` all good", "SUCCESS")])
def test_a_markdown_decorated_status_is_read(text, status):
    assert extract_status(text) == status


def test_a_markdown_decorated_strategy_is_read():
    assert extract_strategy('**strategy:** ridge {"alpha": 1}') == ("ridge", {"alpha": 1})
    assert extract_strategy("- **Strategy**: `svr`") == ("svr", {})


def test_a_truncated_block_is_named_as_cut_off_and_reasked(tmp_path):
    with fake_openai([answer("```python\nfor i in range(3):\n    print(i", finish_reason="length"),
                      answer(f"```python\n{PROGRAM}```")]) as server:
        sink = ListSink()
        got = ask(_gateway(server, sink), "coder", "coder", ASK, CODE)
    assert got.ok and got.reasked
    first = next(e for e in sink.events if e.kind == "answer_reasked")
    assert "cut off at its limit" in first.payload["problem"] and "never closed" in first.payload["problem"]
    assert "answer shorter" in server.requests[1].messages[-1]["content"]


def test_chatty_prose_is_reasked_naming_what_was_missing():
    with fake_openai([answer("Sure! I would fit a cubic polynomial, it is a great idea."),
                      answer(f"```python\n{PROGRAM}```")]) as server:
        got = ask(_gateway(server), "coder", "coder", ASK, CODE)
    assert got.ok and got.reasked
    assert "holds no Python program" in server.requests[1].messages[-1]["content"]


def test_null_content_cut_off_by_length_is_named_not_an_empty_answer():
    with fake_openai([truncated(), truncated()]) as server:
        got = ask(_gateway(server), "coder", "coder", ASK, CODE)
    assert not got.ok and "cut off at its limit" in got.problem and "before any text" in got.problem
    assert len(server.requests) == 2  # one re-ask, bounded


# --- the provider: errors, limits, prices --------------------------------------------------------------
def test_retry_after_is_obeyed_and_failed_calls_are_counted(monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(engine.gateway.time, "sleep", slept.append)
    sink = ListSink()
    with fake_openai([rate_limited(3), answer("fine")]) as server:
        gateway = _gateway(server, sink)
        assert gateway.complete("coder", "coder", ASK).text == "fine"
    assert sum(slept) >= 3  # it was told 3 s; the old gateway waited 0.5 s
    failed = [e for e in sink.events if e.kind == "model_call_failed"]
    assert len(failed) == 1 and failed[0].payload["error_kind"] == "rate_limit" and failed[0].payload["retry_in_s"] >= 3
    assert gateway.budget.used.failed_calls == 1 and gateway.budget.used.calls == 1


@pytest.mark.parametrize("reply,kind", [(server_error(), "server_error"), (not_json(), "server_error")])
def test_a_broken_server_is_retried_then_unavailable(monkeypatch, reply, kind):
    monkeypatch.setattr(engine.gateway.time, "sleep", lambda s: None)
    with fake_openai([reply] * 3) as server:
        gateway = _gateway(server)
        with pytest.raises(ModelUnavailable) as info:
            gateway.complete("coder", "coder", ASK)
    assert info.value.attempts == 3 and gateway.budget.used.failed_calls == 3


def test_a_timeout_uses_the_configured_seconds(monkeypatch):
    monkeypatch.setattr(engine.gateway.time, "sleep", lambda s: None)
    with fake_openai([delayed(3, answer("late"))] * 3) as server:
        with pytest.raises(ModelUnavailable) as info:
            _gateway(server, timeout_s=1.0).complete("coder", "coder", ASK)
    assert info.value.kind == "timeout"


def test_a_refusal_is_a_bad_answer_named_as_a_refusal():
    with fake_openai([refusal("I can't help with that.")] * 3) as server:
        with pytest.raises(ModelCallError, match="refused to answer: I can't help"):
            _gateway(server).complete("coder", "coder", ASK)


def test_the_answer_is_fitted_inside_the_context_and_the_budget_reserves_it():
    with fake_openai([answer("ok")]) as server:
        _gateway(server, context_tokens=2048, max_answer_tokens=4096).complete("coder", "coder", ASK)
        asked = server.requests[0].body["max_tokens"]
    assert 1900 < asked < 2048  # the old gateway sent 4096 to a 2,048-token server, refused every time


def test_a_prompt_that_leaves_no_room_is_refused_before_the_call_with_the_numbers():
    # the role's own rules are never cut: nothing can make this fit
    rules = "You are the coder of a Trellis research team working on the task above.\n" + "rule " * 400
    with fake_openai() as server:
        with pytest.raises(ModelCallError, match="context_tokens"):
            _gateway(server, context_tokens=256).complete("coder", "coder", [{"role": "system", "content": rules},
                                                                              {"role": "user", "content": "go"}])
        assert server.requests == []


def test_a_prompt_too_long_for_the_context_has_its_longest_input_cut_to_fit(examples):
    from engine.llm import count_tokens
    from engine.prompt_format import CUT_MARK, build_messages, inputs, split_system

    task = load_task(examples / "soil-respiration-sites").description()
    report = "\n".join(f"- column {i}: mean {i * 0.5:.3f}, sd {i * 0.1:.3f}, 0 missing" for i in range(1500))
    messages = build_messages("coder", "Write the program.", "One python block.", task,
                              {"plan": "strategy: ridge {}", "report": report})
    sink = ListSink()
    with fake_openai([answer(f"```python\n{PROGRAM}```")]) as server:
        _gateway(server, sink, context_tokens=4096, max_answer_tokens=1024).complete("coder", "coder", messages)
        sent = server.requests[0].messages
        asked = server.requests[0].body["max_tokens"]
    given = inputs(sent[1]["content"])
    assert given["plan"] == "strategy: ridge {}"                      # a short input is left whole
    assert given["report"].startswith("- column 0:") and "- column 1499:" in given["report"]  # head and tail kept
    assert CUT_MARK.split("{")[0] in given["report"]
    assert split_system(sent[0]["content"])[0] == task                  # the task is cut last, and not here
    assert count_tokens("openai/fake", sent) + asked <= 4096 and asked == 1024
    call = next(e.payload for e in sink.events if e.kind == "model_call")
    assert call["prompt_cut_chars"] > len(report) // 2 and call["messages"] == sent  # the trace shows what was sent


def test_a_cut_off_answer_is_reasked_shorter_with_twice_the_room():
    with fake_openai([answer("```python\nimport numpy as np\n# first I will", finish_reason="length"),
                      answer(f"```python\n{PROGRAM}```")]) as server:
        got = ask(_gateway(server, max_answer_tokens=300, context_tokens=8192), "coder", "coder", ASK, CODE)
        rooms = [r.body["max_tokens"] for r in server.requests]
    assert got.ok and rooms == [300, 600]
    with fake_openai([answer("```python\nimport numpy", finish_reason="length"), answer("```python\nx = 1\n```")]) as server:
        ask(_gateway(server, max_answer_tokens=300, context_tokens=700), "coder", "coder", ASK, CODE)
        second = server.requests[1].body["max_tokens"]
    assert 300 < second < 700  # no more than the context leaves


def test_context_exceeded_names_the_setting_that_fixes_it():
    with fake_openai([context_length_exceeded(2048, 3000)]) as server:
        with pytest.raises(ModelCallError, match="context_tokens"):
            _gateway(server).complete("coder", "coder", ASK)


def test_an_unpriced_model_under_a_cost_budget_is_refused_unless_priced(examples, tmp_path):
    task = load_task(examples / "discontinuous-1d")
    with pytest.raises(ModelSettingsError, match="--price"):
        run_workflow(task, team_workflow(task), RunConfig(run_dir=tmp_path / "r", budget=Budget(max_cost_usd=1.0),
                                                          models=ModelSettings.of("openai/my-local-model")))
    assert not (tmp_path / "r").exists()  # refused before anything was written


# --- a whole team on a model that answers like a small real one -----------------------------------------
def _small_model(body: dict):
    """Per role: the coder's first program does not compile, the verifier names no STATUS."""
    role = role_of(body["messages"])
    if role == "analyzer":
        return answer("~~~python3\nimport pandas as pd\nprint(pd.read_csv('data/train.csv').describe())\n~~~")
    if role == "planner":
        return answer("**Strategy:** cubic polynomial\nFit a cubic.")
    if role == "coder":
        return answer("```Python\nimport numpy as np\nfor i in range(3)\n    print(i)\n```")
    if role == "debugger":
        return answer(f"The loop lacked a colon.\n```python\n{PROGRAM}```")
    if role == "verifier":
        return answer("The program looks right to me and the predictions look fine.")
    return answer("# Report\nA cubic polynomial; validation_relative_l2: 0.5 as printed.")


def test_a_team_on_a_small_model_delivers(examples, tmp_path):
    task = load_task(examples / "discontinuous-1d")
    sink = ListSink()
    with fake_openai(default=_small_model) as server:
        result = run_workflow(task, team_workflow(task), RunConfig(
            run_dir=tmp_path / "run", models=ModelSettings.of("openai/small", api_base=server.base_url)), sinks=[sink])
    # the code that did not compile went to the debugger, not to a halt at the handoff
    assert result.agent_status["debugger"] == "SUCCESS"
    finished = {e.agent: e.payload for e in sink.events if e.kind == "agent_finished"}
    assert "decided from the checks: SUCCESS" in finished["verifier"]["message"]  # not a default RETRY
    assert result.status == "completed" and result.metric["ok"]
    started = next(e for e in sink.events if e.kind == "run_started")
    assert started.payload["endpoints"]["coder"]["endpoint"] == server.base_url
    # the coder was told the exact line its program must print
    coder_prompt = next(r for r in server.requests if role_of(r.messages) == "coder").messages[0]["content"]
    assert "validation_relative_l2: <number>" in coder_prompt
