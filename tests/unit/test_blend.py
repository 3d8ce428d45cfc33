"""A blend embeds its parts' programs as text: what it runs must be exactly each part's own program,
whatever characters the parts' settings hold."""
from __future__ import annotations

import ast

from engine.offline.blend import BLEND
from engine.offline.strategy import DataSpec
from engine.offline.strategies import get_strategy
from engine.prompt_format import extract_strategy

SPEC = DataSpec("data/train.csv", "data/test_features.csv", "y", ("a", "b"), "id", "predictions.csv")


def _parts_of(code: str) -> tuple:
    tree = ast.parse(code)
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "PARTS")
    return ast.literal_eval(node.value)


def test_each_embedded_part_is_exactly_the_program_its_strategy_renders_even_with_quotes_and_escapes():
    hostile = "x''' + \"\"\" \\n \\\\ $y ${z}"
    parts = [["ridge", {"alpha": hostile}], ["svr", {}]]
    code = BLEND.render({"parts": parts}, SPEC, 5)
    embedded = _parts_of(code)
    assert [key for key, _, _ in embedded] == ["ridge", "svr"]
    assert embedded[0][2] == get_strategy("ridge").render({"alpha": hostile}, SPEC, 5)
    assert embedded[1][2] == get_strategy("svr").render({}, SPEC, 5)
    assert embedded[0][1] == {"alpha": hostile}
    assert code.startswith("# strategy: blend ")


def test_the_blend_header_names_its_parts_with_every_setting_resolved():
    code = BLEND.render({"parts": [["ridge", {}], ["knn", {"n_neighbors": 10}]]}, SPEC, 5)
    key, params = extract_strategy(code)
    assert key == "blend"
    assert params["parts"] == [["ridge", get_strategy("ridge").default_params()],
                               ["knn", {**get_strategy("knn").default_params(), "n_neighbors": 10}]]
