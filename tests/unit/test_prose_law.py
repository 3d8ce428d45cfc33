"""A law stated in a task's text (engine/assessment/prose_law.py): the offline scientist reads the
ODE or closed form a scientist writes in prose, sorts its names into parameters, states, time,
stated constants and data columns, and writes it as functions a program fits; equations it
cannot use are named, never guessed at, and the text is never executed."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from engine.assessment.prose_law import python_source, read_law, time_column_for

SIR = """Each town's outbreak follows the SIR model

    dS/dt = -beta * S * I / N
    dI/dt = beta * S * I / N - gamma * I
    dR/dt = gamma * I

where t is in days. At the first report S(0) = N - I0, I(0) = I0, R(0) = 0."""


def program(law) -> dict:
    """The functions python_source writes, loaded as a program would."""
    namespace: dict = {"math": math}
    exec(compile(python_source(law), "stated_law", "exec"), namespace)
    return namespace


def test_an_sir_model_in_prose_becomes_the_functions_a_program_integrates():
    reading = read_law(SIR, target="I", names=["beta", "gamma"], columns=["town", "N", "I0", "day"])
    law = reading.law
    assert reading.problem == "" and law is not None
    # R never feeds back into I: only the states I depends on are integrated
    assert law.states == ("S", "I") and law.observed == "I" and law.time_column == "day"
    assert law.unknown_initial == () and set(law.columns) == {"N", "I0"}
    ns = program(law)
    row, p = {"N": 1000.0, "I0": 5.0}, {"beta": 0.4, "gamma": 0.1}
    assert ns["stated_initial"](row, p) == [995.0, 5.0]
    sol = solve_ivp(lambda t, y: ns["stated_rhs"](t, y, p, row), (0, 60), ns["stated_initial"](row, p),
                    t_eval=[60], rtol=1e-9, atol=1e-9)

    def sir(t, y):  # the same model, written here by hand
        s, i = y
        return [-0.4 * s * i / 1000, 0.4 * s * i / 1000 - 0.1 * i]
    ref = solve_ivp(sir, (0, 60), [995.0, 5.0], t_eval=[60], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(sol.y, ref.y, rtol=1e-6)


def test_the_same_law_in_other_notation_reads_the_same():
    plain = read_law("dB/dt = k1 * A - k2 * B, dA/dt = -k1 * A", target="B", names=["k1", "k2"],
                     columns=["A0", "t_min"]).law
    styled = read_law("d[B]/dt = k1\u00b7A \u2212 k2 B;  A'(t) = \u2212k1 A", target="B", names=["k1", "k2"],
                      columns=["A0", "t_min"]).law
    assert plain is not None and styled is not None
    assert plain.rhs == styled.rhs and set(plain.states) == set(styled.states) == {"A", "B"}


def test_a_start_the_text_gives_as_a_column_is_read_and_one_it_does_not_give_is_fitted():
    text = ("Every experiment starts from pure A at a known concentration A0.\n"
            "    dA/dt = -k1 * A\n    dB/dt =  k1 * A - k2 * B\n    dC/dt =  k2 * B\n")
    law = read_law(text, target="B", names=["k1", "k2"], columns=["experiment", "A0", "t_min"]).law
    assert law.states == ("A", "B")            # C is never needed for B
    assert law.initial == {"A": "A0"} and law.unknown_initial == ("B",)
    assert law.time_column == "t_min"          # named like the law's time variable
    assert program(law)["stated_initial"]({"A0": 2.0}, {"k1": 1, "k2": 1, "B(0)": 0.01}) == [2.0, 0.01]
    # said in words where the run starts: "with no B" is a start of 0; elsewhere "no" says nothing
    told = read_law(text.replace("A0.", "A0, with no B and no C.") + "No B was measured late.\n",
                    target="B", names=["k1", "k2"], columns=["experiment", "A0", "t_min"]).law
    assert told.initial == {"A": "A0", "B": "0"} and told.unknown_initial == ()
    untold = read_law(text + "There was no B in the late samples.\n", target="B", names=["k1", "k2"],
                      columns=["experiment", "A0", "t_min"]).law
    assert untold.unknown_initial == ("B",)


def test_a_closed_form_and_a_stated_constant():
    text = "The height follows h = h0 - g t^2 / 2 + v t with g = 9.81 (m/s^2)."
    law = read_law(text, target="h", names=["v"], columns=["h0", "t"]).law
    assert law is not None and not law.is_ode and law.constants == {"g": 9.81}
    assert program(law)["stated_value"]({"h0": 10.0, "t": 2.0}, {"v": 3.0}) == pytest.approx(10 - 9.81 * 2 + 6)


@pytest.mark.parametrize("text, columns, problem", [
    ("dI/dt = beta S I / N - gamma I - mu I", ["N", "day"], "mu"),            # a name nobody defines
    ("dS/dt = -beta S I / N", ["N", "day"], "not of the measured `I`"),       # no equation for the target
    ("dI/dt = beta I - gamma I", ["N", "depth_m"], "time `t`"),               # no column holds the time
    ("dI/dt = beta I", ["day"], "does not involve gamma"),                    # a parameter the law never uses
    ("dI/dt = beta I - gamma I, dS/dx = -beta S", ["day"], "several variables"),
])
def test_equations_that_cannot_be_fitted_are_named(text, columns, problem):
    reading = read_law(text, target="I", names=["beta", "gamma"], columns=columns)
    assert reading.law is None and problem in reading.problem


def test_a_mention_of_a_derivative_in_passing_never_replaces_the_law():
    text = "dI/dt = beta * S * I / N - gamma * I\ndS/dt = -beta * S * I / N\nAt the peak dI/dt = 0 holds."
    law = read_law(text, target="I", names=["beta", "gamma"], columns=["N", "I0", "day"]).law
    assert "gamma" in law.rhs["I"]


def test_words_that_name_time_pick_the_time_column():
    assert time_column_for("t", ["site", "hours", "y0"]) == "hours"
    assert time_column_for("t", ["site", "Day_of_year"]) == "Day_of_year"
    assert time_column_for("tau", ["tau", "time"]) == "tau"
    assert time_column_for("t", ["site", "depth"]) == ""
    assert time_column_for("t", ["site", "when"], stated="when") == "when"


@pytest.mark.parametrize("formula", [
    "beta S I / N - gamma I", "A0 k1 / (k2 - k1) (exp(-k1 t) - exp(-k2 t))", "x^(1/3) + 2^3", "-x^2",
    "a/(b c) - d", "(a+b)^2 / (c-d)", "a^b^c", "(a^b)^c", "-(a - b)", "a - -b", "2.5e-3 x", "a/b/c",
    "(a/b)^2", "a^(-1/2)", "-3/4 x", "x/(2 y)", "- x / y^2 + 1", "sqrt(x) / 2 + ln(y) - abs(a - b)",
])
def test_the_program_computes_what_the_formula_says(formula):
    """The source is printed from the parsed tree, with the fewest parentheses: it must still
    compute exactly what sympy computes for the formula."""
    import random

    from engine.assessment.prose_law import _parse, _to_python

    expr = _parse(formula)
    source = _to_python(expr, {})
    rng = random.Random(formula)
    for _ in range(5):
        values = {str(s): rng.uniform(0.5, 2.0) for s in expr.free_symbols}
        assert eval(source, {"math": math}, values) == pytest.approx(float(expr.subs(values).evalf()), rel=1e-9)
