import hashlib

import pytest

from engine.contracts import CsvOf, MapOf, Record, check_value, is_assignable, parse_type
from engine.errors import ContractSyntaxError

EVIDENCE = "{exit_code:int, stdout_tail:str, files:{path: sha256}}"


def test_parses_the_types_scientists_write():
    t = parse_type(EVIDENCE)
    assert isinstance(t, Record)
    assert isinstance(t.field_map()["files"], MapOf)
    assert isinstance(parse_type("csv[id:int, y:float]"), CsvOf)
    assert str(parse_type("list[ float ]")) == "list[float]"


@pytest.mark.parametrize("text, fragment", [
    ("csv[id:int, y:flot]", "unknown type 'flot'"),
    ("{a:int, a:str}", "appears twice"),
    ("{exit_code:int", "ended"),
    ("list[int]]", "after a complete type"),
    ("csv[]", "at least one column"),
    ("map[int, str]", "map keys"),
    ("", "empty type"),
])
def test_bad_types_say_what_is_wrong_and_where(text, fragment):
    with pytest.raises(ContractSyntaxError) as info:
        parse_type(text)
    assert fragment in str(info.value)


def test_record_with_more_fields_satisfies_one_with_fewer_but_not_reverse():
    big = parse_type("{exit_code:int, stdout_tail:str, files:{path: sha256}, status:str}")
    small = parse_type("{exit_code:int, files:{path: sha256}}")
    assert is_assignable(big, small)
    assert not is_assignable(small, big)
    assert is_assignable(parse_type("int"), parse_type("float"))
    assert not is_assignable(parse_type("float"), parse_type("int"))
    assert not is_assignable(parse_type("markdown"), parse_type("python"))


def test_evidence_values_are_checked_field_by_field():
    ok = {"exit_code": 0, "stdout_tail": "done", "files": {"p.csv": "a" * 64}}
    assert check_value(ok, parse_type(EVIDENCE)) == []
    bad = {"exit_code": "0", "files": {"p.csv": "nothex"}}
    errors = check_value(bad, parse_type(EVIDENCE), where="execution_evidence")
    assert any("execution_evidence.exit_code: expected int" in e for e in errors)
    assert any("missing field 'stdout_tail'" in e for e in errors)
    assert any("sha256" in e and "'p.csv'" in e for e in errors)


def test_python_contract_rejects_code_that_does_not_parse():
    assert check_value("x = 1\n", parse_type("python")) == []
    errors = check_value("def f(:\n", parse_type("python"))
    assert errors and "does not parse" in errors[0]


def _store(*blobs: bytes):
    table = {hashlib.sha256(b).hexdigest(): b for b in blobs}
    return table, table.get


def test_csv_contract_reads_the_file_and_checks_columns_and_cells():
    good = b"id,y\n0,1.5\n1,2.5\n"
    wrong_type = b"id,y\n0,abc\n"
    missing_col = b"id,value\n0,1\n"
    table, read = _store(good, wrong_type, missing_col)
    t = parse_type("csv[id:int, y:float]")
    ref = lambda b: {"path": "predictions.csv", "sha256": hashlib.sha256(b).hexdigest()}  # noqa: E731
    assert check_value(ref(good), t, read) == []
    assert "column 'y': expected float, got 'abc'" in check_value(ref(wrong_type), t, read)[0]
    assert "lacks column(s) y" in check_value(ref(missing_col), t, read)[0]
    assert "missing from the artifact store" in check_value({"path": "x.csv", "sha256": "0" * 64}, t, read)[0]
    assert "expected a file reference" in check_value("predictions.csv", t, read)[0]
