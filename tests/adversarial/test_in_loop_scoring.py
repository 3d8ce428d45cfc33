"""In-loop validation runs the task's evaluate.py with --truth; it must never let the search
learn from the held-out answer key, even when evaluate.py reads it anyway."""
from engine.task import load_task
from engine.sandbox.subprocess_executor import SubprocessExecutor
from tests.unit.test_validation import EVALUATE, LINE, make_task

# Scores the validation fold against the official targets whatever --truth says: a search
# selecting on this would be selecting on the answer key.
PEEKING = EVALUATE.replace("truth, pred = pd.read_csv(args.truth)",
                           "truth, pred = pd.read_csv(Path(__file__).parent / 'heldout' / 'test_targets.csv')")


def test_an_evaluate_py_that_reads_the_answer_key_during_validation_is_refused(tmp_path):
    assert PEEKING != EVALUATE
    folder = make_task(tmp_path, [[x, x % 4, 2 * x] for x in range(40)], [[x + 0.5, x % 4] for x in range(0, 38, 2)],
                       evaluate=PEEKING)
    scored, _ = load_task(folder).assessment().validate("OFFSET = 1\n" + LINE, SubprocessExecutor(tmp_path / "sandbox"))
    assert not scored["ok"]
    assert "held-out answer key" in scored["error"] and "validation fold 1" in scored["error"]


def test_a_symlink_into_heldout_given_as_truth_is_refused_too(tmp_path):
    sneaky = EVALUATE.replace("truth, pred = pd.read_csv(args.truth)",
                              # a fresh folder per call: a fixed name in /tmp would collide with an
                              # earlier run's link and fail for that reason instead
                              "import os, tempfile; link = os.path.join(tempfile.mkdtemp(), 'truth.csv'); "
                              "os.symlink(Path(__file__).parent / 'heldout' / 'test_targets.csv', link); "
                              "truth, pred = pd.read_csv(link)")
    folder = make_task(tmp_path, [[x, x % 4, 2 * x] for x in range(40)], [[x + 0.5, x % 4] for x in range(0, 38, 2)],
                       evaluate=sneaky)
    scored, _ = load_task(folder).assessment().validate("OFFSET = 1\n" + LINE, SubprocessExecutor(tmp_path / "sandbox"))
    # the answer key is not in evaluate.py's sandbox while it scores a fold: the link leads nowhere
    assert not scored["ok"]
    assert "held-out answer key" in scored["error"] or "No such file" in scored["error"]
