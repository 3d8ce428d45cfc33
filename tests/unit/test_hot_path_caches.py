"""What the per-call caches of the hot path (issue 29) keep must never change an answer: token
counts equal litellm's own, an endpoint follows the environment as it changes, a task's text and a
workflow's incoming edges are those of the object asked, and a trace line reads back as the event."""
from __future__ import annotations

import json
import math

import pytest

from engine.llm import count_text_tokens, count_tokens, get_litellm
from engine.models import ModelOptions, ModelSettings
from engine.trace import Event

PROMPTS = [
    [{"role": "system", "content": "You are the planner. " * 40}, {"role": "user", "content": "Plan é ü 🙂\n" * 60}],
    [{"role": "user", "content": ""}],
    [{"role": "user", "content": "a", "name": "bob"}, {"role": "assistant", "content": "b"}],
    [{"role": "system", "content": "You are the planner. " * 40}, {"role": "user", "content": "another task"},
     {"role": "assistant", "content": "STATUS: SUCCESS"}, {"role": "user", "content": "x" * 70_000}],
]


@pytest.mark.parametrize("model", ["gpt-4o", "openai/some-unknown-model", "trellis/offline-scientist"])
def test_token_counts_equal_litellms_own_whatever_was_counted_before(model):
    lm = get_litellm()
    tokenizer_model = "gpt-4o" if model.startswith("trellis/") else model
    for _ in range(2):  # the second time from the caches
        for messages in PROMPTS:
            try:
                expected = lm.token_counter(model=tokenizer_model, messages=messages)
            except Exception:  # noqa: BLE001 - litellm's own fallback, as count_tokens does
                expected = lm.token_counter(model="gpt-4o", messages=messages)
            assert count_tokens(model, messages) == expected
    tool_round = [{"role": "user", "content": "profile the data"},
                  {"role": "assistant", "content": None, "tool_calls": [
                      {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a.csv"}'}}]},
                  {"role": "tool", "tool_call_id": "c1", "name": "read_file", "content": "x,y\n1,2\n"}]
    assert count_tokens(model, tool_round) == lm.token_counter(model=tokenizer_model, messages=tool_round)


def test_the_offline_scientists_count_is_litellms_for_gpt_4o_without_importing_it():
    """engine/token_count.py counts as litellm does for gpt-4o: ordinary prompts, a long run of
    one character (counted in pieces), special tokens taken as text, names and tool calls."""
    from engine.token_count import count_messages, count_text

    lm = get_litellm()
    texts = ["", "STATUS: SUCCESS", "<|endoftext|> and <|im_start|> as text", "." * 5000,
             "é ü 🙂 中文 " * 400, "def f(x):\n    return x ** 2\n" * 200]
    for text in texts:
        assert count_text(text) == lm.token_counter(model="gpt-4o", text=text) == count_text_tokens(text)
    for messages in PROMPTS:
        assert count_messages(messages) == lm.token_counter(model="gpt-4o", messages=messages)


def test_a_fresh_process_answers_the_offline_model_without_importing_litellm():
    import subprocess
    import sys

    probe = ("import sys; from engine.offline.chat import offline_completion, count_tokens; "
             "r = offline_completion({'messages': [{'role': 'system', 'content': 'You are the analyzer.'}, "
             "{'role': 'user', 'content': 'Describe the data.'}], 'seed': 1}); "
             "assert r.usage.prompt_tokens > 0 and r.choices[0].message.content; "
             "assert count_tokens('trellis/offline-scientist', [{'role': 'user', 'content': 'hi'}]) > 0; "
             "print('litellm' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                          cwd=str(__import__("pathlib").Path(__file__).resolve().parents[2]))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"


def test_an_endpoint_follows_the_environment_as_it_changes(monkeypatch):
    settings = ModelSettings()
    monkeypatch.delenv("TRELLIS_MODEL", raising=False)
    monkeypatch.delenv("TRELLIS_MODEL_PLANNER", raising=False)
    assert settings.endpoint("planner").offline
    monkeypatch.setenv("TRELLIS_MODEL", "ollama/qwen2.5")
    monkeypatch.setenv("TRELLIS_CONTEXT_TOKENS", "8192")
    assert settings.endpoint("planner").model == "ollama/qwen2.5"
    assert settings.endpoint("planner").context_tokens == 8192
    monkeypatch.setenv("TRELLIS_MODEL_PLANNER", "openai/gpt-4o-mini")
    assert settings.endpoint("planner").model == "openai/gpt-4o-mini"
    assert settings.endpoint("coder").model == "ollama/qwen2.5"
    monkeypatch.setenv("TRELLIS_CONTEXT_TOKENS", "not a number")
    with pytest.raises(Exception, match="TRELLIS_CONTEXT_TOKENS|context_tokens"):
        settings.endpoint("planner")
    monkeypatch.delenv("TRELLIS_CONTEXT_TOKENS")
    agent = ModelOptions(max_answer_tokens=300)
    assert settings.endpoint("coder", "ollama/llama3", agent).max_answer_tokens == 300
    assert settings.endpoint("coder", "ollama/llama3").max_answer_tokens != 300


def test_incoming_edges_and_task_text_belong_to_the_object_asked(light_task):
    from engine.synthesis import team_workflow
    from engine.task import load_task

    task = load_task(light_task)
    workflow = team_workflow(task).validate()
    last = workflow.agents[-1].id
    assert workflow.incoming(last) == [e for e in workflow.edges if e.target == last]
    shorter = workflow.derive(edges=tuple(e for e in workflow.edges if e.target != last))
    assert shorter.incoming(last) == [] and workflow.incoming(last)
    workflow.incoming(last).clear()  # a caller's list is its own
    assert workflow.incoming(last)
    assert task.description() == task.description() and task.title in task.description()


def test_a_trace_line_reads_back_as_the_event():
    payload = {"text": "é 🙂 \"quoted\"\n", "nan": math.nan, "inf": math.inf, "tuple": (1, 2), "big": 10 ** 30,
               "nested": {"1": [None, True, 0.1]}, "odd": object()}
    event = Event("run", 7, 1.25, "note", "planner", 2, payload)
    back = json.loads(event.to_json())
    assert back["seq"] == 7 and back["agent"] == "planner" and back["iteration"] == 2
    assert back["payload"]["text"] == payload["text"] and back["payload"]["tuple"] == [1, 2]
    assert math.isnan(back["payload"]["nan"]) and back["payload"]["inf"] == math.inf
    assert back["payload"]["big"] == 10 ** 30 and back["payload"]["nested"] == {"1": [None, True, 0.1]}
    assert back["payload"]["odd"].startswith("<object object")
    assert Event.from_dict(back).payload["text"] == payload["text"]


def test_without_the_encoding_file_counts_come_from_litellm_and_the_file_is_sought_once(monkeypatch):
    """A litellm without its bundled tokenizer (or a closed network): the offline scientist's counts
    are litellm's own, and tiktoken is asked once, not on every call (its download may hang)."""
    import sys
    import types

    from engine import token_count

    asked = []

    def no_file(name):
        asked.append(name)
        raise OSError("no such file, and no network")

    lm = get_litellm()
    expected = [lm.token_counter(model="gpt-4o", messages=m) for m in PROMPTS[:2]]  # litellm keeps its encoding
    token_count._load_encoding.cache_clear()
    # a tiktoken without the file, for this module alone (litellm holds the real one)
    monkeypatch.setitem(sys.modules, "tiktoken", types.SimpleNamespace(get_encoding=no_file))
    try:
        for _ in range(2):
            assert [count_tokens("trellis/offline-scientist", m) for m in PROMPTS[:2]] == expected
        assert count_text_tokens("no answer counted before") == lm.token_counter(model="gpt-4o",
                                                                                 text="no answer counted before")
        # the offline scientist still answers, its usage counted by litellm
        from engine.offline.chat import offline_completion

        answered = offline_completion({"messages": PROMPTS[0], "seed": 1})
        assert answered.usage.prompt_tokens == expected[0] and answered.usage.completion_tokens > 0
        assert asked == ["o200k_base"]
    finally:
        token_count._load_encoding.cache_clear()


def test_litellm_itself_answers_the_offline_model_as_the_gateway_does():
    """DESIGN.md: the offline provider is registered with litellm as a custom provider. The
    gateway answers it without litellm; anything that calls litellm with it gets the same answer."""
    from engine.gateway import _litellm
    from engine.offline.chat import offline_completion

    messages = [{"role": "system", "content": "You are the analyzer."}, {"role": "user", "content": "Describe the data."}]
    litellm = _litellm()
    _litellm()  # registered once
    assert [p["provider"] for p in litellm.custom_provider_map].count("trellis") == 1
    through = litellm.completion(model="trellis/offline-scientist", messages=messages, seed=1)
    direct = offline_completion({"messages": messages, "seed": 1})
    assert through.choices[0].message.content == direct.choices[0].message.content
    assert through.usage.prompt_tokens == direct.usage.prompt_tokens
