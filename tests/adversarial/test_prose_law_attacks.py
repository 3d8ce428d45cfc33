"""Attacks on the reader of a law stated in a task's text (engine/assessment/prose_law.py), found by
a reviewer who was asked to break it: the text comes from whoever uploads a task, and what the
reader returns is written into a program's source. Each of these broke the first version."""
from __future__ import annotations

import multiprocessing

import numpy as np
import pytest

from engine.assessment.prose_law import python_source, read_law
from tests.unit.test_prose_law import program


def _read_in_child(queue, args, kwargs):
    reading = read_law(*args, **kwargs)
    queue.put((reading.law is not None, reading.problem))


def read_within(seconds: float, *args, **kwargs) -> tuple[bool, str]:
    """read_law in a child process that must answer within ``seconds`` (a hang fails, not blocks)."""
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_read_in_child, args=(queue, args, kwargs))
    child.start()
    child.join(seconds)
    if child.is_alive():
        child.kill()
        pytest.fail(f"read_law did not answer within {seconds} s")
    return queue.get(timeout=5)


@pytest.mark.parametrize("hostile", [
    # attribute access on a Symbol reaches str methods, and sympify of a str runs Python
    "dA/dt = -k A exp(k.name.encode().fromhex(x{hexcmd}.name.lstrip(x.name)).decode())",
    'dA/dt = __import__("os").system("touch {marker}")',
    "dA/dt = (lambda: open('{marker}', 'w'))()",
    "dA/dt = k * A; import os; os.system('touch {marker}')",
])
def test_the_text_never_runs_in_the_engine(hostile, tmp_path):
    marker = tmp_path / "pwned"
    hexcmd = f"__import__('os').system('touch {marker}')".encode().hex()
    reading = read_law(hostile.format(marker=marker, hexcmd=hexcmd), target="A", names=["k"], columns=["t"])
    assert not marker.exists()
    if reading.law is not None:  # at most a harmless formula in front survives
        assert all(w not in reading.law.rhs["A"] for w in ("__", "os", "open", "lambda", "name"))


@pytest.mark.parametrize("text", [
    "dA/dt = -(9 k)^999999999 A",
    "dA/dt = -k A + sin(9^9^9)",
    "dA/dt = -k A 9^9^9^9",
    "dA/dt = -k A ((((10^64)^64)^64)^64)^64",
    # issue 37, item 7: a tower of exponentials compared by max() hung the worker at 100 % CPU
    "dA/dt = -k A + max(exp(exp(exp(64))), exp(exp(exp(63))))",
    "dA/dt = -k A + min(cosh(exp(exp(40))), sinh(exp(700)))",
])
def test_a_power_too_large_to_compute_is_refused_at_once(text):
    has_law, problem = read_within(20, text, target="A", names=["k"], columns=["t"])
    assert not has_law and "cannot read the formula" in problem


def test_a_long_text_is_read_in_bounded_time():
    has_law, problem = read_within(20, "Growth d" + " " * 20000 + "/dt.\n" + "dA/dt = sin(a,b) a+b*c-d/e\n" * 200,
                                   target="A", names=["k"], columns=["t"])
    assert not has_law


def test_a_value_said_at_the_start_is_a_start_never_a_constant_that_freezes_a_state():
    law = read_law("dA/dt = -k1 A, dB/dt = k1 A - k2 B. Initially A = 1.0 and B = 0 (mM).",
                   target="B", names=["k1", "k2"], columns=["t"]).law
    assert law.constants == {} and law.initial == {"A": "1.0", "B": "0.0"}
    forced = read_law("dx/dt = -k x + F sin(w t), with F = 2 and w = 3; at t = 0, x(0) = 0",
                      target="x", names=["k"], columns=["hours"]).law
    assert "t" not in forced.constants and forced.constants == {"F": 2.0, "w": 3.0}
    rhs = program(forced)["stated_rhs"]
    assert rhs(1.0, [0.5], {"k": 1.0}, {}) != rhs(2.0, [0.5], {"k": 1.0}, {})  # the forcing moves with time


def test_a_state_written_with_its_time_argument_is_the_state():
    law = read_law("Logistic growth: dN/dt = r N(t) (1 - N(t)/K), N(0) = N0.",
                   target="N", names=["r", "K"], columns=["N0", "t"]).law
    assert program(law)["stated_rhs"](0.0, [50.0], {"r": 0.5, "K": 100.0}, {"N0": 1.0}) == [pytest.approx(12.5)]


@pytest.mark.parametrize("columns, expected", [
    (["S_0", "N", "days"], "days"),
    (["h_start", "time_s"], "time_s"),
    (["S", "N", "I0", "day"], "day"),
])
def test_the_time_column_is_a_time_not_a_column_starting_with_s_or_h(columns, expected):
    text = "dI/dt = beta I - gamma I, with I(0) = 1"
    law = read_law(text, target="I", names=["beta", "gamma"], columns=columns).law
    assert law.time_column == expected


def test_names_of_a_law_never_collide_with_the_programs_own():
    law = read_law("dm/dt = a - dm m, dp/dt = b m - dp p, with m(0) = 0 and p(0) = 0",
                   target="p", names=["a", "b", "dm", "dp"], columns=["hours"]).law
    ns = program(law)
    p = {"a": 2.0, "b": 1.0, "dm": 0.5, "dp": 0.25}
    assert ns["stated_rhs"](0.0, [1.0, 2.0], p, {}) == [pytest.approx(1.5), pytest.approx(0.5)]
    for name in ("y", "row", "t"):
        law = read_law(f"d{name}/dx = -k {name}", target=name, names=["k"], columns=["x"]).law
        assert program(law)["stated_rhs"](0.0, [2.0], {"k": 3.0}, {}) == [pytest.approx(-6.0)]
    assert "cannot appear in a formula" in read_law("dA/dt = -math A", target="A", names=["math"],
                                                    columns=["t"]).problem


def test_an_infinite_constant_is_not_written_into_a_program():
    law = read_law("dv/dt = -g + k v with g = 1e999", target="v", names=["k"], columns=["t"])
    assert law.law is None or "inf" not in python_source(law.law)


def test_two_different_laws_for_one_state_are_named_not_chosen():
    reading = read_law("Plain exponential growth, dN/dt = r N, overestimates the late counts; fit instead the "
                       "logistic law dN/dt = r N (1 - N/K) with K = 1000 cells.", target="N", names=["r"],
                       columns=["t"])
    assert reading.law is None and "two different equations for dN/dt" in reading.problem


@pytest.mark.parametrize("text", [
    "dv/dt = -g - (c/m) v|v|, with g = 9.81 and m = 0.5",
    "dI/dt = beta S I / N - gamma I - mu I | S",
])
def test_a_formula_read_short_is_refused_not_fitted(text):
    reading = read_law(text, target="v" if text.startswith("dv") else "I", names=["c"] if "c/m" in text else
                       ["beta", "gamma", "mu"], columns=["t", "N"])
    assert reading.law is None and "cannot read the formula" in reading.problem


def test_the_micro_sign_is_the_greek_mu():
    law = read_law("dI/dt = \u03b2 S I / N \u2212 \u03b3 I \u2212 \u00b5 I, dS/dt = -\u03b2 S I / N",
                   target="I", names=["\u03b2", "\u03b3", "\u03bc"], columns=["N", "t"]).law
    assert law is not None and "\u03bc" in law.rhs["I"]


def test_a_constant_at_a_sentence_end_and_eulers_number():
    law = read_law("The height falls as dh/dt = -g t + v0, where g = 9.81.", target="h", names=["v0"],
                   columns=["t"]).law
    assert law.constants == {"g": 9.81}
    closed = read_law("A = A0 e^(-k t)", target="A", names=["k"], columns=["A0", "t"]).law
    value = program(closed)["stated_value"]({"A0": 2.0, "t": 1.0}, {"k": 1.0})
    assert value == pytest.approx(2.0 * np.exp(-1.0))
