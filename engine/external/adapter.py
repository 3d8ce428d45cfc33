"""The typed adapter between a Trellis workflow and an external agent: the inputs the agent
declares (checked against their contracts) and the task's files go into a container of the
agent's image, with the Docker sandbox's confinement (no network, read-only root, a uid of its
own, caps); the agent's entry point is called; what it returns is checked against its declared
outputs before anything downstream sees it."""
from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..checks import check_value
from ..contracts import parse_type
from ..sandbox import ExecutionLimits, ExecutionRequest, ExecutionResult
from .spec import ExternalAgent, ExternalAgentError

INPUTS_FILE = "trellis_inputs.json"
OUTPUTS_FILE = "trellis_outputs.json"
AGENT_DIR = "/opt/agent"
SITE_DIR = "/opt/agent-site"

_CALL = '''
import json, sys
from importlib import import_module
from pathlib import Path
sys.path[:0] = [AGENT_DIR, SITE_DIR]
module, _, function = ENTRY.partition(":")
inputs = json.loads(Path(INPUTS_FILE).read_text(encoding="utf-8"))
outputs = getattr(import_module(module), function)(inputs, Path("."))
if not isinstance(outputs, dict):
    raise SystemExit(f"the agent returned {type(outputs).__name__}, not a dict of its outputs")
Path(OUTPUTS_FILE).write_text(json.dumps(outputs), encoding="utf-8")
print("agent finished:", ", ".join(sorted(outputs)))
'''

_SELFTEST = '''
import os, runpy, sys
sys.path[:0] = [AGENT_DIR, SITE_DIR]
os.chdir(os.environ.get("TMPDIR") or ".")
runpy.run_path(AGENT_DIR + "/" + SELFTEST, run_name="__main__")
'''


def _constants(**values: str) -> str:
    return "".join(f"{k} = {v!r}\n" for k, v in values.items())


@dataclass
class AgentRun:
    produced: dict
    errors: list[str] = field(default_factory=list)
    result: ExecutionResult | None = None

    @property
    def ok(self) -> bool:
        return not self.errors


def call_program(agent: ExternalAgent) -> str:
    return _constants(AGENT_DIR=AGENT_DIR, SITE_DIR=SITE_DIR, ENTRY=agent.entry, INPUTS_FILE=INPUTS_FILE,
                      OUTPUTS_FILE=OUTPUTS_FILE) + _CALL


def selftest_program(agent: ExternalAgent) -> str:
    return _constants(AGENT_DIR=AGENT_DIR, SITE_DIR=SITE_DIR, SELFTEST=agent.selftest) + _SELFTEST


def run_agent(agent: ExternalAgent, inputs: dict, files: dict[str, Path], executor,
              limits: ExecutionLimits | None = None) -> AgentRun:
    """Run ``agent`` on ``inputs`` (only those it declares) with the task's ``files``, in the
    container ``executor`` makes (a DockerExecutor of the agent's image)."""
    missing = [name for name in agent.inputs if name not in inputs]
    if missing:
        raise ExternalAgentError(f"external agent {agent.name} needs {', '.join(missing)}, which it was not handed")
    given = {name: inputs[name] for name in agent.inputs}
    with tempfile.TemporaryDirectory(prefix="trellis-agent-in-") as tmp:
        path = Path(tmp) / INPUTS_FILE
        path.write_text(json.dumps(given, default=str), encoding="utf-8")
        result = executor.run(ExecutionRequest(code=call_program(agent), input_files={INPUTS_FILE: path, **files},
                                               limits=limits or ExecutionLimits()))
    if result.status != "ok":
        tail = (result.stderr or result.stdout or "").strip().splitlines()[-4:]
        return AgentRun({}, [f"external agent {agent.name} {result.status} (exit {result.exit_code}): "
                             + " | ".join(tail)[:800]], result)
    out = Path(result.workdir) / OUTPUTS_FILE if result.workdir else None
    if out is None or not out.is_file() or out.is_symlink():
        return AgentRun({}, [f"external agent {agent.name} wrote no {OUTPUTS_FILE}"], result)
    try:
        produced = json.loads(out.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        return AgentRun({}, [f"external agent {agent.name} wrote {OUTPUTS_FILE} that is not JSON ({exc})"], result)
    errors = []
    for name, contract in agent.outputs.items():
        if name not in produced:
            errors.append(f"external agent {agent.name} did not return {name!r} ({contract})")
            continue
        errors += [f"external agent {agent.name} output {name!r}: {e}"
                   for e in check_value(produced[name], parse_type(contract), lambda sha: None, where=name)]
    return AgentRun({k: v for k, v in produced.items() if k in agent.outputs}, errors, result)
