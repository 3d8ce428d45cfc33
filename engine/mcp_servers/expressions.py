"""Model forms for curve fitting: a small named set, or an expression parsed, never evaluated.

An expression such as ``a * x**b + c`` is parsed with :mod:`ast` and only arithmetic, numbers,
the variable ``x``, parameter names and a few numpy functions are accepted; it is then computed
by walking that tree over numpy arrays. No ``eval``, no attribute access, no calls to anything
but the listed functions: a hostile string is refused with the reason.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np
from engine import python_ast

MAX_EXPRESSION_CHARS = 200
MAX_PARAMETERS = 8
FUNCTIONS: dict[str, Callable] = {"exp": np.exp, "log": np.log, "sqrt": np.sqrt, "sin": np.sin, "cos": np.cos,
                                  "tanh": np.tanh, "abs": np.abs}
_BINARY = {ast.Add: np.add, ast.Sub: np.subtract, ast.Mult: np.multiply, ast.Div: np.divide, ast.Pow: np.power}
_PARAM = re.compile(r"[a-z][a-z0-9_]{0,15}")

# The named forms and their expressions (parameters in order of appearance).
NAMED: dict[str, str] = {
    "linear": "a*x + b",
    "quadratic": "a*x**2 + b*x + c",
    "power_law": "a*x**b",
    "exponential": "a*exp(b*x)",
    "logarithmic": "a*log(x) + b",
    "logistic": "l / (1 + exp(-k*(x - x0)))",
}


class ExpressionError(ValueError):
    """An expression that is not an accepted model form."""


@dataclass(frozen=True)
class ModelForm:
    text: str
    parameters: tuple[str, ...]
    tree: ast.expr

    def __call__(self, x: np.ndarray, *values: float) -> np.ndarray:
        scope = dict(zip(self.parameters, values))
        with np.errstate(all="ignore"):
            out = _evaluate(self.tree, x, scope)
        return np.broadcast_to(np.asarray(out, dtype=float), np.shape(x)).astype(float)


def model_form(model: str) -> ModelForm:
    """The form a name of NAMED or an expression in ``x`` stands for."""
    if not isinstance(model, str) or not model.strip():
        raise ExpressionError(f"give a model: one of {', '.join(NAMED)}, or an expression in x such as 'a*x**b + c'")
    text = NAMED.get(model.strip(), model.strip())
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(f"the expression has {len(text)} characters; the limit is {MAX_EXPRESSION_CHARS}")
    try:
        tree = python_ast.parse(text, mode="eval").body
    except SyntaxError as exc:
        raise ExpressionError(f"the expression {text!r} does not parse: {exc.msg}") from exc
    parameters: list[str] = []
    _check(tree, parameters)
    if "x" not in {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}:
        raise ExpressionError(f"the expression {text!r} does not use x")
    if not parameters:
        raise ExpressionError(f"the expression {text!r} has no parameter to fit")
    if len(parameters) > MAX_PARAMETERS:
        raise ExpressionError(f"the expression has {len(parameters)} parameters; the limit is {MAX_PARAMETERS}")
    return ModelForm(text, tuple(parameters), tree)


def _check(node: ast.AST, parameters: list[str]) -> None:
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        _check(node.left, parameters)
        _check(node.right, parameters)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        _check(node.operand, parameters)
    elif isinstance(node, ast.Constant) and type(node.value) in (int, float):
        if not abs(node.value) < 1e300:  # a 200-digit integer is no float
            raise ExpressionError(f"the number {str(node.value)[:20]}… is too large")
    elif isinstance(node, ast.Name):
        if node.id in FUNCTIONS:
            raise ExpressionError(f"{node.id} is a function: write {node.id}(...)")
        if node.id != "x":
            if not _PARAM.fullmatch(node.id):
                raise ExpressionError(f"parameter names are short lower-case names, not {node.id!r}")
            if node.id not in parameters:
                parameters.append(node.id)
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCTIONS \
            and len(node.args) == 1 and not node.keywords:
        _check(node.args[0], parameters)
    else:
        allowed = ", ".join(FUNCTIONS)
        raise ExpressionError(f"{ast.unparse(node)[:60]!r} is not allowed in a model form: use numbers, x, "
                              f"parameter names, + - * / ** and the functions {allowed}")


def _evaluate(node: ast.expr, x: np.ndarray, scope: dict[str, float]):
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](_evaluate(node.left, x, scope), _evaluate(node.right, x, scope))
    if isinstance(node, ast.UnaryOp):
        value = _evaluate(node.operand, x, scope)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Constant):
        return float(node.value)
    if isinstance(node, ast.Name):
        return x if node.id == "x" else scope[node.id]
    if isinstance(node, ast.Call):
        return FUNCTIONS[node.func.id](_evaluate(node.args[0], x, scope))
    raise ExpressionError("unchecked expression")  # _check refused everything else
