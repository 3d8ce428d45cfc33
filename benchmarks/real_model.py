"""Trellis with a real language model: each example run through a model server, and per role
how its answers went.

    python benchmarks/real_model.py                       # SmolLM2 via llama.cpp's server (requirements-llm.txt)
    python benchmarks/real_model.py --model ollama/qwen2.5-coder:7b --api-base http://127.0.0.1:11434
    python benchmarks/real_model.py --examples discontinuous-1d --replay tests/fixtures/cassettes/smollm2-discontinuous-1d

Prints, per role: calls, unusable answers (parse failures), re-asks and whether the re-asked
answer was used, tokens, mean prompt size (tokens and characters), seconds waiting on the model;
and per run: delivered or not, the official metric, failed calls. Every unusable answer is
re-asked and named; the "silent" column counts answers neither used nor re-asked (must be 0).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _run(example: str, runs: Path, flags: list[str]) -> tuple[int, list[dict], dict]:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "TRELLIS_MCP_CONFIG": "none"}
    done = subprocess.run([sys.executable, "-m", "engine", "run", f"examples/{example}", "--runs-dir", str(runs),
                           "--no-single-agent", "--executor", "subprocess", *flags], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    traces = sorted(runs.glob("*/trace.jsonl"))
    events = [json.loads(line) for line in traces[-1].read_text().splitlines()] if traces else []
    summary_path = traces[-1].parent / "summary.json" if traces else None
    summary = json.loads(summary_path.read_text()) if summary_path and summary_path.exists() else {}
    if not events:
        print(f"{example}: no trace ({done.returncode}): {done.stderr.strip()[-400:]}", file=sys.stderr)
    return done.returncode, events, summary


def _roles(events: list[dict]) -> dict[str, dict]:
    table: dict[str, dict] = defaultdict(lambda: defaultdict(float))
    for e in events:
        p = e["payload"]
        if e["kind"] == "model_call":
            row = table[p["role"]]
            row["calls"] += 1
            row["tokens"] += p["prompt_tokens"] + p["completion_tokens"]
            row["prompt_tokens"] += p["prompt_tokens"]
            row["prompt_chars"] += p.get("prompt_chars") or 0
            row["seconds"] += p["duration_s"]
            row["cut_off"] += p.get("finish_reason") == "length"
        elif e["kind"] == "answer_reasked":
            row = table[p["role"]]
            if p.get("used") is None:
                row["unusable"] += 1
            else:
                row["reasks"] += 1
                row["reask_used"] += bool(p["used"])
    for row in table.values():
        row["silent"] = row["unusable"] - row["reasks"]
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", nargs="*", default=None, help="example folders (default: all)")
    parser.add_argument("--model", default=None, help="litellm model (default: SmolLM2 on a local llama.cpp server)")
    parser.add_argument("--api-base", default=None)
    parser.add_argument("--context-tokens", default="8192")
    parser.add_argument("--max-answer-tokens", default="400")
    parser.add_argument("--model-timeout", default="600")
    parser.add_argument("--structured-output", default="json_object")
    parser.add_argument("--replay", default=None, help="a cassette to replay instead of a server")
    args = parser.parse_args()
    examples = args.examples or sorted(p.name for p in (ROOT / "examples").iterdir() if (p / "Problem.md").exists())

    with contextlib.ExitStack() as stack:
        model, api_base = args.model, args.api_base
        if model is None:
            model = "openai/smollm2-135m"
            if args.replay is None and api_base is None:
                from tests.local_llm import local_llm_server

                api_base = stack.enter_context(local_llm_server(n_ctx=int(args.context_tokens), n_threads=2)).base_url
        flags = ["--model", model, "--context-tokens", args.context_tokens, "--max-answer-tokens",
                 args.max_answer_tokens, "--model-timeout", args.model_timeout,
                 "--structured-output", args.structured_output]
        flags += ["--api-base", api_base] if api_base else []
        flags += ["--replay", args.replay] if args.replay else []
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        print(f"model {model} at {api_base or ('cassette ' + args.replay if args.replay else 'provider default')}\n")
        header = (f"{'example':<28} {'role':<10} {'calls':>5} {'unusable':>8} {'re-asks':>7} {'used':>4} "
                  f"{'silent':>6} {'cut':>3} {'tokens':>7} {'prompt tok':>10} {'prompt chr':>10} {'seconds':>8}")
        runs = []
        print(header)
        print("-" * len(header))
        for example in examples:
            code, events, summary = _run(example, tmp / example, flags)
            for role, row in sorted(_roles(events).items()):
                n = max(row["calls"], 1)
                print(f"{example:<28} {role:<10} {int(row['calls']):>5} {int(row['unusable']):>8} {int(row['reasks']):>7} "
                      f"{int(row['reask_used']):>4} {int(row['silent']):>6} {int(row['cut_off']):>3} "
                      f"{int(row['tokens']):>7} {row['prompt_tokens'] / n:>10.0f} {row['prompt_chars'] / n:>10.0f} "
                      f"{row['seconds']:>8.1f}")
            metric = summary.get("metric") or {}
            usage = summary.get("usage") or {}
            runs.append((example, summary.get("status", f"exit {code}"),
                         f"{metric['metric']} = {metric['value']:.4g}" if metric.get("ok") else "-",
                         usage.get("failed_calls", 0), summary.get("reason", "")))
        print(f"\n{'example':<28} {'status':<10} {'official metric':<26} {'failed calls':>12}  reason")
        for example, status, metric, failed, reason in runs:
            print(f"{example:<28} {status:<10} {metric:<26} {failed:>12}  {reason[:80]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
