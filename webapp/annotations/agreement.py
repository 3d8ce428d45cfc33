"""Inter-annotator agreement for annotation queues: Cohen's kappa (two annotators) and Fleiss'
kappa (more), in pure Python so the studio needs no statistics package for one page.

Both compare the agreement observed with the agreement expected by chance from how often each
category is used: 1 is perfect agreement, 0 what chance alone gives, below 0 worse than chance.
A kappa is undefined (None) when chance agreement is already perfect, e.g. everybody used one
category for every item."""
from __future__ import annotations

from collections import Counter
from typing import Hashable, Sequence


def cohen_kappa(a: Sequence[Hashable], b: Sequence[Hashable]) -> float | None:
    """Cohen's kappa of two annotators' categories for the same items, in the same order."""
    if len(a) != len(b):
        raise ValueError(f"the two annotators rated {len(a)} and {len(b)} items: pair them first")
    n = len(a)
    if n == 0:
        return None
    observed = sum(1 for x, y in zip(a, b) if x == y) / n
    ca, cb = Counter(a), Counter(b)
    expected = sum(ca[c] * cb[c] for c in set(ca) | set(cb)) / (n * n)
    if expected >= 1.0:
        return None
    return (observed - expected) / (1.0 - expected)


def fleiss_kappa(ratings: Sequence[Sequence[Hashable]]) -> float | None:
    """Fleiss' kappa from each item's categories, one per rater (``[["yes", "no", "yes"], ...]``).

    Items with fewer than two ratings say nothing about agreement and are left out. Fleiss (1971)
    assumes the same number of raters per item; with a varying number, each item's agreement is
    taken over its own rater pairs and chance from all ratings pooled (the usual extension: it is
    Fleiss' kappa exactly when every item has the same number of raters)."""
    items = [list(r) for r in ratings if len(r) >= 2]
    if not items:
        return None
    pooled = Counter(c for r in items for c in r)
    total = sum(pooled.values())
    expected = sum((count / total) ** 2 for count in pooled.values())
    per_item = []
    for r in items:
        m = len(r)
        per_item.append(sum(k * (k - 1) for k in Counter(r).values()) / (m * (m - 1)))
    observed = sum(per_item) / len(per_item)
    if expected >= 1.0:
        return None
    return (observed - expected) / (1.0 - expected)


def fleiss_from_counts(table: Sequence[Sequence[int]]) -> float | None:
    """Fleiss' kappa from the textbook table: one row per item, one column per category, each
    cell the number of raters who chose that category for that item."""
    ratings = [[j for j, count in enumerate(row) for _ in range(count)] for row in table]
    return fleiss_kappa(ratings)


def kappa(by_item: dict[Hashable, dict[str, Hashable]]) -> tuple[str, float | None, int]:
    """Agreement of whoever rated: ``by_item`` maps an item to {annotator: category}. Cohen's
    kappa when exactly two annotators rated anything (over the items both rated), otherwise
    Fleiss'. Returns (method, kappa, number of items it used)."""
    annotators = sorted({who for ratings in by_item.values() for who in ratings})
    if len(annotators) < 2:
        return "none", None, 0
    if len(annotators) == 2:
        x, y = annotators
        both = [r for r in by_item.values() if x in r and y in r]
        return "cohen", cohen_kappa([r[x] for r in both], [r[y] for r in both]), len(both)
    rows = [list(r.values()) for r in by_item.values() if len(r) >= 2]
    return "fleiss", fleiss_kappa(rows), len(rows)


def interpret(value: float | None) -> str:
    """Landis and Koch's (1977) words for a kappa, as reviewers usually quote them."""
    if value is None:
        return "undefined"
    for bound, word in ((0.0, "poor"), (0.2, "slight"), (0.4, "fair"), (0.6, "moderate"), (0.8, "substantial")):
        if value <= bound:
            return word
    return "almost perfect"
