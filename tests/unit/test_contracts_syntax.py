"""The editor's type hint is the engine's own grammar: each form it shows parses, and the
syntaxes it once offered that the engine refuses are not shown."""
from __future__ import annotations

import pytest
from django.template.loader import render_to_string

from engine.contracts import PRIMITIVES, SYNTAX, parse_type
from engine.errors import ContractSyntaxError


@pytest.mark.parametrize("form, example, meaning", SYNTAX)
def test_every_example_of_the_hint_parses(form, example, meaning):
    assert str(parse_type(example))


def test_the_hint_names_every_primitive():
    named = SYNTAX[0][2]
    assert all(name in named for name in PRIMITIVES)


@pytest.mark.parametrize("refused", ["dict[str, float]", "csv{id: int}", "float?"])
def test_the_syntaxes_the_old_hint_offered_are_refused_and_not_shown(refused):
    with pytest.raises(ContractSyntaxError):
        parse_type(refused)
    html = render_to_string("runs/_editor.html", {"run": {"pk": 1}, "version": {"number": 1}, "type_syntax": SYNTAX,
                                                  "can": {"review": True}})
    stem = refused.split("[")[0].split("{")[0].rstrip("?")
    assert f"<code>{refused}" not in html and f"<code>{stem}{{" not in html and "T?" not in html
    assert "<code>csv[id:int, y:float]</code>" in html and "<code>map[K, T]</code>" in html
