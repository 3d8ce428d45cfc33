"""The run_task command's logic, independent of Django so the engine stands on its own
(`python -m engine run examples/<task>` does the same as `manage.py run_task`)."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TextIO

from .budget import Budget
from .console import ConsoleSink, print_summary
from .errors import TrellisError
from .runner import RunConfig, RunResult, run_workflow
from .synthesis import WORKFLOWS
from .task import load_task
from .workflow import Workflow


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("task", help="task folder, e.g. examples/discontinuous-1d")
    parser.add_argument("--model", help="any litellm model for every role (default: offline provider, "
                        "or TRELLIS_MODEL / TRELLIS_MODEL_<ROLE>)")
    parser.add_argument("--workflow", default="team",
                        help=f"starting workflow: {', '.join(WORKFLOWS)}, or a workflow JSON file")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-tokens", type=int, default=200_000, help="token budget of the run")
    parser.add_argument("--max-cost", type=float, default=None, help="cost budget in USD")
    parser.add_argument("--max-calls", type=int, default=None, help="model-call budget")
    parser.add_argument("--runs-dir", default="var/runs", help="where traces and artifacts go")
    parser.add_argument("--cache", action="store_true", help="reuse identical model calls (record/replay)")
    parser.add_argument("--verbose", action="store_true", help="print every event, handoffs included")


def run_from_args(args: argparse.Namespace, out: TextIO = sys.stdout) -> RunResult:
    task = load_task(args.task)
    if args.workflow in WORKFLOWS:
        workflow = WORKFLOWS[args.workflow](task)
    else:
        workflow = Workflow.from_json(Path(args.workflow).read_text()).validate()
    run_id = time.strftime("%Y%m%d-%H%M%S") + f"-{task.name}"
    run_dir = Path(args.runs_dir) / run_id
    config = RunConfig(run_dir=run_dir, seed=args.seed, model_override=args.model, run_id=run_id,
                       budget=Budget(max_tokens=args.max_tokens, max_cost_usd=args.max_cost, max_calls=args.max_calls),
                       cache_dir=Path(args.runs_dir) / "model-cache" if args.cache else None)
    result = run_workflow(task, workflow, config, sinks=[ConsoleSink(out, verbose=args.verbose)])
    print_summary(result, out)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine run")
    sub = parser.add_subparsers(dest="command", required=True)
    add_run_arguments(sub.add_parser("run", help="run a task folder"))
    args = parser.parse_args(argv)
    try:
        result = run_from_args(args)
    except TrellisError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0 if result.status == "completed" else 1
