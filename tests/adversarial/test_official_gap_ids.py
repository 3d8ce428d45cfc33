"""A program that writes its ids as "3.0" or " 003 " (pandas does the first whenever an id column
passes through a float) is scored by evaluate.py, which reads ids as numbers: the team's lead over
a baseline must get its interval too, not a false "its predictions miss held-out rows"."""
from engine.official_gap import official_gaps
from tests.unit.test_official_gap import _noisy, _predictions, _scored, _task


def _ids_as(data: bytes, spell) -> bytes:
    head, *rows = data.decode().splitlines()
    return ("\n".join([head, *(f"{spell(int(r.split(',')[0]))},{r.split(',', 1)[1]}" for r in rows)]) + "\n").encode()


def test_ids_written_as_floats_or_padded_are_the_rows_evaluate_py_scored(tmp_path):
    task, truth = _task(tmp_path, rows=50)
    team = _scored(task, _noisy(truth, 0.1, seed=1))
    for spell in (lambda i: f"{i}.0", lambda i: f" {i:03d} "):
        other = _scored(task, _ids_as(_predictions([10.0] * len(truth)), spell))
        assert other[1]["ok"], other[1]  # evaluate.py accepted these ids
        gap = official_gaps(task, *team, {"constant": other})["constant"]
        assert gap.verdict == "better", gap
        # ... and the same spelling on the team's side
        flipped = official_gaps(task, _ids_as(team[0], spell), team[1], {"constant": other})["constant"]
        assert flipped.verdict == "better", flipped
