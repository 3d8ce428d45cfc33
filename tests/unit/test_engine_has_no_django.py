"""The one rule of the layout: engine/ never imports Django."""
import ast
import subprocess
import sys
from pathlib import Path

ENGINE = Path(__file__).resolve().parents[2] / "engine"


def test_no_engine_module_imports_django():
    offenders = []
    for path in ENGINE.rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.relative_to(ENGINE.parent)}: {n}" for n in names
                          if n == "django" or n.startswith("django.") or n.startswith("webapp")]
    assert offenders == []


def test_engine_runs_a_workflow_import_without_loading_django():
    code = ("import sys, engine.runner, engine.cli, engine.replay, engine.synthesis; "
            "assert not any(m == 'django' or m.startswith('django.') for m in sys.modules), 'django loaded'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ENGINE.parent)
