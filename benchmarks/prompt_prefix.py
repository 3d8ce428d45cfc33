"""What the shared prompt prefix saves on a local model server: a run's role prompts, in the order a
team asks them, sent to llama.cpp's server (SmolLM2 by default) in the prompt layout Trellis uses
(the task description opens the system message, the same in every call) and in the older one (the
role's rules first, the task at the head of the user message), each asking for one token so that
the time is the server reading the prompt.

    python benchmarks/prompt_prefix.py                             # SmolLM2 on llama.cpp (requirements-llm.txt)
    python benchmarks/prompt_prefix.py --example soil-respiration-sites --rounds 3
    python benchmarks/prompt_prefix.py --api-base http://127.0.0.1:8080/v1 --model openai/any

The prompts are a real run's: the offline team's, on the example, recorded by the engine.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def run_prompts(example: str) -> list[tuple[str, list[dict]]]:
    """(role, messages) of every model call of an offline team run on the example."""
    with tempfile.TemporaryDirectory() as runs:
        env = {**os.environ, "TRELLIS_MCP_CONFIG": "none"}
        subprocess.run([sys.executable, "-m", "engine", "run", f"examples/{example}", "--runs-dir", runs,
                        "--no-single-agent", "--executor", "subprocess"], cwd=ROOT, env=env, check=True,
                       capture_output=True)
        trace = next(Path(runs).glob("*/trace.jsonl"))
        events = [json.loads(line) for line in trace.read_text().splitlines()]
    return [(e["payload"]["role"], e["payload"]["messages"]) for e in events if e["kind"] == "model_call"]


def older_layout(messages: list[dict]) -> list[dict]:
    """The same prompt with the role's rules first and the task at the head of the user message."""
    from engine.prompt_format import NO_INPUTS, split_system

    system = next(m for m in messages if m["role"] == "system")["content"]
    task, rules = split_system(system)
    out = []
    for m in messages:
        if m["role"] == "system":
            out.append({"role": "system", "content": rules.replace("task above", "task below")})
        elif m is next(x for x in messages if x["role"] == "user"):
            body = "" if m["content"] == NO_INPUTS else m["content"]
            out.append({"role": "user", "content": f"{task}\n\n{body}".rstrip()})
        else:
            out.append(m)
    return out


def timed(api_base: str, model: str, messages: list[dict]) -> float:
    import litellm

    started = time.perf_counter()
    litellm.completion(model=model, api_base=api_base, api_key="none", messages=messages, max_tokens=1,
                       temperature=0.0, timeout=600)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--example", default="discontinuous-1d")
    parser.add_argument("--model", default="openai/smollm2-135m")
    parser.add_argument("--api-base", default=None, help="a running OpenAI-compatible server (default: start SmolLM2)")
    parser.add_argument("--rounds", type=int, default=3, help="each layout's whole sequence, this many times")
    args = parser.parse_args()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    prompts = run_prompts(args.example)
    layouts = {"task first (Trellis)": [m for _, m in prompts],
               "rules first (older)": [older_layout(m) for _, m in prompts]}
    seconds: dict[str, list[list[float]]] = {name: [[] for _ in prompts] for name in layouts}
    with contextlib.ExitStack() as stack:
        api_base = args.api_base
        if api_base is None:
            from tests.local_llm import local_llm_server

            api_base = stack.enter_context(local_llm_server(n_ctx=8192, n_threads=2)).base_url
        for _ in range(args.rounds):
            for name, sequence in layouts.items():  # alternated, so neither layout warms the other's cache
                for i, messages in enumerate(sequence):
                    seconds[name][i].append(timed(api_base, args.model, messages))
    chars = [sum(len(m["content"] or "") for m in messages) for _, messages in prompts]
    print(f"{args.example}: {len(prompts)} role prompts, {args.rounds} round(s), median seconds to read each prompt\n")
    print(f"{'#':>2} {'role':<10} {'chars':>6} " + " ".join(f"{name:>22}" for name in layouts))
    for i, (role, _) in enumerate(prompts):
        print(f"{i:>2} {role:<10} {chars[i]:>6} " + " ".join(f"{statistics.median(seconds[n][i]):>22.3f}" for n in layouts))
    totals = {n: sum(statistics.median(s) for s in seconds[n]) for n in layouts}
    print(f"{'':>2} {'total':<10} {sum(chars):>6} " + " ".join(f"{totals[n]:>22.3f}" for n in layouts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
