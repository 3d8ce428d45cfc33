"""Cohen's and Fleiss' kappa (webapp/annotations/agreement.py) on textbook examples."""
from __future__ import annotations

import pytest

from webapp.annotations.agreement import cohen_kappa, fleiss_from_counts, fleiss_kappa, interpret, kappa


def test_cohen_kappa_of_the_textbook_yes_no_table():
    # 50 proposals read by A and B: both yes 20, A yes B no 5, A no B yes 10, both no 15.
    # p_o = 0.7, p_e = 0.5 * 0.6 + 0.5 * 0.4 = 0.5, kappa = 0.4 (Wikipedia, "Cohen's kappa").
    a = ["yes"] * 25 + ["no"] * 25
    b = ["yes"] * 20 + ["no"] * 5 + ["yes"] * 10 + ["no"] * 15
    assert cohen_kappa(a, b) == pytest.approx(0.4)


def test_cohen_kappa_matches_scikit_learn_on_three_categories():
    sklearn = pytest.importorskip("sklearn.metrics")
    a = ["good", "bad", "ugly", "good", "good", "bad", "ugly", "ugly", "good", "bad", "good", "ugly"]
    b = ["good", "bad", "good", "good", "bad", "bad", "ugly", "good", "good", "bad", "ugly", "ugly"]
    assert cohen_kappa(a, b) == pytest.approx(sklearn.cohen_kappa_score(a, b))


def test_cohen_kappa_is_one_for_identical_and_negative_for_opposite_raters():
    assert cohen_kappa([1, 0, 1, 0], [1, 0, 1, 0]) == pytest.approx(1.0)
    assert cohen_kappa([1, 0, 1, 0], [0, 1, 0, 1]) == pytest.approx(-1.0)
    assert cohen_kappa([1, 1, 1], [1, 1, 1]) is None  # chance already agrees perfectly
    with pytest.raises(ValueError):
        cohen_kappa([1, 0], [1])


# Fleiss (1971) as reproduced on Wikipedia ("Fleiss' kappa"): 10 subjects, 14 raters, 5 categories.
FLEISS_TABLE = [
    [0, 0, 0, 0, 14], [0, 2, 6, 4, 2], [0, 0, 3, 5, 6], [0, 3, 9, 2, 0], [2, 2, 8, 1, 1],
    [7, 7, 0, 0, 0], [3, 2, 6, 3, 0], [2, 5, 3, 2, 2], [6, 5, 2, 1, 0], [0, 2, 2, 3, 7],
]


def test_fleiss_kappa_of_the_textbook_table():
    assert fleiss_from_counts(FLEISS_TABLE) == pytest.approx(0.210, abs=0.0005)


def test_fleiss_kappa_at_the_extremes_and_with_too_few_ratings():
    assert fleiss_kappa([["a", "a", "a"], ["b", "b", "b"]]) == pytest.approx(1.0)
    # items with one rating carry no agreement and are left out
    assert fleiss_kappa([["a", "a", "a"], ["b", "b", "b"], ["a"]]) == pytest.approx(1.0)
    assert fleiss_kappa([["x"]]) is None
    assert fleiss_kappa([["a", "a"], ["a", "a"]]) is None


def test_kappa_chooses_cohen_for_two_annotators_and_fleiss_for_more():
    two = {1: {"ann": "y", "bob": "y"}, 2: {"ann": "n", "bob": "y"}, 3: {"ann": "n", "bob": "n"}, 4: {"ann": "y"}}
    method, value, used = kappa(two)
    assert (method, used) == ("cohen", 3)
    assert value == pytest.approx(cohen_kappa(["y", "n", "n"], ["y", "y", "n"]))
    three = {i: {"a": c, "b": c, "c": c} for i, c in enumerate("xyxy")}
    assert kappa(three)[:2] == ("fleiss", pytest.approx(1.0))
    assert kappa({1: {"a": "x"}}) == ("none", None, 0)


def test_interpretation_follows_landis_and_koch():
    assert [interpret(v) for v in (-0.1, 0.1, 0.3, 0.5, 0.7, 0.9, None)] == [
        "poor", "slight", "fair", "moderate", "substantial", "almost perfect", "undefined"]
