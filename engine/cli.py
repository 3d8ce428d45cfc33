"""The run_task command's logic, independent of Django so the engine stands on its own
(`python -m engine run examples/<task>` does the same as `manage.py run_task`)."""
from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from . import evaluator_draft as ev
from . import places
from .archive import WorkflowArchive
from .budget import Budget
from .console import ConsoleSink, print_summary
from .ending import end_run
from .errors import ModelUnavailable, TrellisError
from .gateway import ModelGateway, endpoint_lines
from .limits import bounded, model_problem
from .models import STRUCTURED_MODES, ModelOptions, ModelSettings, parse_role_setting
from .preflight import PreflightError, TaskFacts, preflight
from .run_spec import RunSpec
from .runner import RunConfig, roles_of, run_workflow
from .sandbox.select import make_executor
from .synthesis import WORKFLOWS, export, single_agent_workflow
from .synthesis.imports import load_workflow_file, read_text
from .synthesis.start import choose_start
from .task import Task, load_task
from .trace import JsonlTraceSink, Tracer
from .workflow import Workflow

if TYPE_CHECKING:
    from .runner import RunResult


def model_name(text: str) -> str:
    problem = model_problem("the model", text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The model a user brings: run-wide settings, per-role settings, and the cassette."""
    group = parser.add_argument_group("model", "which model serves the run and how to reach it (README: "
                                      "'Using your own model'); each also from TRELLIS_* environment variables")
    group.add_argument("--model", type=model_name, help="any litellm model for every role, e.g. "
                       "openai/smollm2 with --api-base, ollama/qwen2.5-coder:7b, anthropic/claude-sonnet-4-5 "
                       "(default: the offline scientist, or TRELLIS_MODEL / TRELLIS_MODEL_<ROLE>)")
    group.add_argument("--api-base", help="the model server's URL, e.g. http://127.0.0.1:8080/v1 (llama.cpp, vLLM), "
                       "http://127.0.0.1:11434 (Ollama)")
    group.add_argument("--api-key-env", metavar="VAR", help="the environment variable holding the API key "
                       "(never the key itself); a local server needs none")
    group.add_argument("--max-answer-tokens", type=bounded(16, 1_000_000), metavar="N",
                       help="the longest answer asked for (default 4096, or half the context)")
    group.add_argument("--context-tokens", type=bounded(256, 10_000_000), metavar="N",
                       help="the model's context size: each answer is fitted inside it with its prompt")
    group.add_argument("--model-timeout", type=bounded(1, 86_400, float), metavar="S",
                       help="seconds to wait for one answer (default 120; a CPU server may need 600)")
    group.add_argument("--price", type=bounded(0, 10_000, float), nargs=2, metavar=("IN", "OUT"),
                       help="USD per million prompt and answer tokens, for a model litellm has no price for")
    group.add_argument("--structured-output", choices=STRUCTURED_MODES, default=None,
                       help="how JSON answers (judge, mutations) are asked for: json_schema (OpenAI, vLLM), "
                            "json_object (llama.cpp's server), off, or auto (default: where litellm knows the model takes it)")
    group.add_argument("--role", action="append", default=[], metavar="ROLE:KEY=VALUE[,KEY=VALUE]",
                       help="settings for one role, e.g. coder:model=ollama/qwen2.5-coder:7b,max_answer_tokens=3000 "
                            "(repeatable; keys: " + ", ".join(f.name for f in fields(ModelOptions)) + ")")
    group.add_argument("--cassette", metavar="DIR", help="record every model call under DIR and reuse what is there "
                       "(a run made with a real model, replayable offline)")
    group.add_argument("--replay", metavar="DIR", help="replay a cassette: answer every call from DIR and fail on a "
                       "call that was not recorded; no provider is reached")


def model_settings(args: argparse.Namespace) -> ModelSettings:
    """The run's model settings from its flags; ModelSettingsError (a TrellisError) says what is wrong."""
    price = getattr(args, "price", None)
    run = ModelOptions(model=args.model, api_base=getattr(args, "api_base", None),
                       api_key_env=getattr(args, "api_key_env", None),
                       max_answer_tokens=getattr(args, "max_answer_tokens", None),
                       context_tokens=getattr(args, "context_tokens", None),
                       timeout_s=getattr(args, "model_timeout", None),
                       price_in=price[0] if price else None, price_out=price[1] if price else None,
                       structured=getattr(args, "structured_output", None))
    roles: dict[str, ModelOptions] = {}
    for text in getattr(args, "role", None) or []:
        role, options = parse_role_setting(text)
        roles[role] = options.over(roles.get(role, ModelOptions()))
    return ModelSettings(run, roles)


def cassette(args: argparse.Namespace) -> tuple[Path | None, bool]:
    """(cache folder, replay only) from --replay, --cassette or the shared --cache."""
    if getattr(args, "replay", None):
        folder = Path(args.replay)
        if not folder.is_dir():
            raise TrellisError(f"--replay {args.replay}: no such cassette folder")
        return folder, True
    if getattr(args, "cassette", None):
        return Path(args.cassette), False
    if getattr(args, "cache", False):
        return Path(args.runs_dir) / "model-cache", False
    return None, False


def describe_models(models: ModelSettings, workflow: Workflow) -> list[str]:
    return endpoint_lines(models, roles_of(workflow))


# The run spec's options that ``python -m engine run`` takes too: one run of a workflow has a
# seed, a budget, a start, the single-agent baseline beside it, a sandbox.
RUN_OPTIONS = ("seed", "max_tokens", "max_cost_usd", "max_calls", "start", "single_agent", "executor", "external_agents")
RUN_MAX_TOKENS = 200_000  # one run of a team, where a search's default is for many


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("task", help="task folder, e.g. examples/discontinuous-1d")
    parser.add_argument("--workflow", default="team",
                        help=f"starting workflow: {', '.join(WORKFLOWS)}, or a workflow JSON file")
    parser.add_argument("--archive", default=str(places.archive_dir()),
                        help="the workflow archive --start archive reads (default $TRELLIS_VAR_DIR/archive)")
    # the options a run shares with a search: the run spec's fields, flags and bounds (engine/run_spec.py)
    RunSpec.add_arguments(parser, names=RUN_OPTIONS)
    parser.set_defaults(max_tokens=RUN_MAX_TOKENS)
    parser.add_argument("--runs-dir", default=str(places.runs_dir()),
                        help="where traces and artifacts go (default $TRELLIS_VAR_DIR/runs, var/runs)")
    parser.add_argument("--cache", action="store_true", help="reuse identical model calls across runs "
                        "(var/runs/model-cache; see --cassette and --replay for one run's recording)")
    parser.add_argument("--verbose", action="store_true", help="print every event, handoffs included")
    add_model_arguments(parser)


def check_task(task: Task, out: TextIO, cache_dir: Path | None = None) -> TaskFacts:
    """Preflight a task before any model call: print its facts and warnings on ``out``, or raise
    PreflightError listing every problem (the commands print it without a traceback)."""
    facts = preflight(task, cache_dir=cache_dir)
    classes = f" with classes {facts.classes[:10]}{'…' if len(facts.classes) > 10 else ''}" if facts.classes else ""
    out.write(f"preflight: {task.name} is a {facts.kind}{classes} ({facts.kind_source}); "
              f"{len(facts.features)} feature(s), {facts.n_train} training and {facts.n_test} test rows; "
              f"evaluate.py prints {facts.evaluate_metric or 'an unchecked metric'} ({facts.seconds:.2f} s)\n")
    for warning in facts.warnings:
        out.write(f"preflight warning: {warning}\n")
    out.flush()
    return facts


def run_from_args(args: argparse.Namespace, out: TextIO = sys.stdout) -> RunResult:
    task = load_task(args.task)
    check_task(task, out, Path(args.runs_dir) / "preflight-cache")
    run_id = time.strftime("%Y%m%d-%H%M%S") + f"-{task.name}"
    run_dir = Path(args.runs_dir) / run_id
    start = getattr(args, "start", None)
    if start:
        workflow = _start(task, start, args, run_dir, out)
    elif args.workflow in WORKFLOWS:
        workflow = WORKFLOWS[args.workflow](task)
    else:
        try:
            text = Path(args.workflow).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise TrellisError(f"--workflow {args.workflow}: not one of {', '.join(WORKFLOWS)} and not a "
                               f"readable workflow JSON file ({exc})") from exc
        workflow = Workflow.from_json(text).validate()
    models = model_settings(args)
    cache_dir, replay_only = cassette(args)
    for line in describe_models(models, workflow):
        out.write(line + "\n")

    kind = getattr(args, "executor", None)
    # before any model call: an executor asked for that cannot run here is an error naming the fix
    choice = make_executor(kind, run_dir / "sandboxes")
    out.write(choice.describe() + "\n")
    out.flush()
    # validated like any probe of a search (in-loop folds, beats-trivial, claims); the held-out
    # evaluate.py scores it once, after, in the ending (engine/ending.py end_run)
    config = RunConfig(run_dir=run_dir, seed=args.seed, models=models, run_id=run_id, scoring="validation",
                       budget=Budget(max_tokens=args.max_tokens, max_cost_usd=args.max_cost_usd, max_calls=args.max_calls),
                       cache_dir=cache_dir, replay_only=replay_only,
                       # the configured MCP servers (mcp_servers.json); a built-in team gets their tools
                       discover_tools=True, allocate_tools=args.workflow in WORKFLOWS and not start,
                       executor_reason=choice.reason)
    try:
        result = run_workflow(task, workflow, config, executor=choice.executor,
                              sinks=[ConsoleSink(out, verbose=args.verbose)])
    except ModelUnavailable as exc:  # the summary of what ran before the model failed, then the error
        if getattr(exc, "result", None) is not None:
            print_summary(exc.result, out)
            out.flush()
        raise
    print_summary(result, out)
    solo_dir = None
    if getattr(args, "single_agent", True) and workflow.name != single_agent_workflow(task).name:
        solo_dir = run_dir.with_name(run_dir.name + "-single-agent")
    end_run(task, result, seed=args.seed, budget=config.budget, out=out, single_agent_dir=solo_dir, models=models,
            cache_dir=cache_dir, replay_only=replay_only, discover_tools=config.allocate_tools,
            executor=make_executor(choice.kind, solo_dir / "sandboxes").executor if solo_dir else None)
    return result


def _start(task: Task, start: str, args: argparse.Namespace, run_dir: Path, out: TextIO) -> Workflow:
    """The workflow ``--start`` names; synthesis's stages traced in <run>/synthesis.jsonl."""
    archive = None
    if start == "archive":
        archive = WorkflowArchive(Path(args.archive))
    run_dir.mkdir(parents=True, exist_ok=True)
    tracer = Tracer(f"{run_dir.name}-synthesis", [JsonlTraceSink(run_dir / "synthesis.jsonl")])
    workflow, info = choose_start(task, start, archive=archive, tracer=tracer,
                                  external_agents=getattr(args, "external_agents", False))
    out.write(f"start: {info['path']}: {info.get('reason', '')}\n")
    return workflow


def add_evaluator_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("task", help="a task folder without evaluate.py")
    parser.add_argument("--approve", metavar="SHA256", help="make the waiting draft the task's evaluate.py: the "
                        "first 8 or more characters of the sha256 it was shown with")
    parser.add_argument("--by", default=os.environ.get("USER", "someone"), help="who approves (default $USER)")
    parser.add_argument("--model", default=None, help="the model that writes the draft (default: the offline "
                        "template, for the metrics it knows)")
    parser.add_argument("--api-base", default=None)
    parser.add_argument("--api-key-env", default=None, metavar="VAR")


def evaluator_from_args(args: argparse.Namespace, out=sys.stdout) -> int:
    """Draft evaluate.py from Evaluation.md and show it, or approve the draft a person read."""
    folder = Path(args.task)
    if args.approve:
        path = ev.approve(folder, args.approve, args.by)
        out.write(f"approved: {path} ({args.approve}) by {args.by}; the task runs with it now\n")
        return 0
    write = None
    if args.model:
        write = _with_models(ModelSettings(ModelOptions(model=args.model, api_base=args.api_base,
                                                        api_key_env=args.api_key_env)))
    draft = ev.draft_for(folder, write)
    out.write(draft.source.rstrip() + "\n\n" + draft.describe() + "\n")
    if draft.ok:
        out.write(f"\nRead it above (saved as {folder / ev.DRAFT}); to use it:\n"
                  f"  python -m engine evaluator {folder} --approve {draft.sha256[:12]}\n")
        return 0
    out.write(f"\nThe draft failed its tests and cannot be approved; fix {folder / ev.DRAFT} by hand and approve "
              "that, or write evaluate.py yourself (README, '`evaluate.py`').\n")
    return 1


def _with_models(models):
    """A writer for the Evaluator: the model ``models`` names, behind a gateway of its own."""
    def run(task):
        gateway = ModelGateway(Budget(max_tokens=200_000), Tracer("evaluator"), models=models)
        return ev.model_draft(gateway, models.run.model or "a model")(task)
    return run


def add_workflow_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("export", "import"),
                        help="export: a Trellis workflow as JSON or a runnable LangGraph program; import: an AFlow "
                             "graph, a LangGraph graph or a Trellis JSON, grounded in a task, printed as Trellis JSON")
    parser.add_argument("file", help="export: a workflow JSON (e.g. var/runs/<run>/final_workflow.json); import: "
                                     "graph.py, graph.py:name, or a JSON file")
    parser.add_argument("--to", choices=("json", "langgraph"), default="json", help="export format")
    parser.add_argument("--task", help="import: the task folder to ground the graph in")
    parser.add_argument("-o", "--output", help="where to write (default: standard output)")


def workflow_from_args(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    if args.action == "export":
        workflow = Workflow.from_json(read_text(Path(args.file)))
        text = export.to_langgraph(workflow) if args.to == "langgraph" else export.to_json(workflow)
    else:
        if not args.task:
            raise TrellisError("workflow import grounds the graph in a task: give --task TASK_FOLDER")
        workflow, said = load_workflow_file(Path(args.file), load_task(args.task))
        print(said, file=sys.stderr)
        text = export.to_json(workflow)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        out.write(f"wrote {args.output}\n")
    else:
        out.write(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m engine")
    sub = parser.add_subparsers(dest="command", required=True)
    add_run_arguments(sub.add_parser("run", help="run a task folder"))
    add_workflow_arguments(sub.add_parser("workflow", help="export a workflow (JSON, LangGraph) or import one "
                                                           "(AFlow, LangGraph, JSON) grounded in a task"))
    add_evaluator_arguments(sub.add_parser("evaluator", help="draft evaluate.py from Evaluation.md for a person "
                                                           "to approve, or approve the draft"))
    args = parser.parse_args(argv)
    try:
        if args.command == "evaluator":
            return evaluator_from_args(args)
        if args.command == "workflow":
            return workflow_from_args(args)
        result = run_from_args(args)
    except TrellisError as exc:
        # one line is the answer; the traceback is for whoever debugs the engine (never for the data's problems)
        if getattr(args, "verbose", False) and not isinstance(exc, PreflightError):
            traceback.print_exc()
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0 if result.status == "completed" else 1
