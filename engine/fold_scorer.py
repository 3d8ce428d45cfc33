"""Score several prediction files with a task's evaluate.py in one process.

Runs in evaluate.py's sandbox (engine/evaluator_sandbox.py), beside a copy of the task folder.
Usage: ``python fold_scorer.py EVALUATE_PY JOBS_JSON RESULTS_JSON`` where
JOBS_JSON lists ``{"predictions": path, "truth": path}`` (``"truth": null`` scores against the
held-out answer key: the official scoring after a final commitment, never a validation fold);
RESULTS_JSON receives, in order, one
``{"exit": code, "stdout": "...", "stderr": "..."}`` per job (a file, not stdout, which an
evaluate.py could write to around Python).

Why one process: evaluate.py scripts import numpy and pandas, which costs this machine most of
a second; a validation scores five folds, every probe of a search. The common modules are
imported once here and each job runs with fresh globals, its exit caught.
"""
import io
import json
import os
import runpy
import sys


def _preload() -> None:
    for name in ("numpy", "pandas"):
        try:
            __import__(name)
        except Exception:  # evaluate.py will say what it lacks itself
            pass


def _answer_key_guard(heldout: str):
    """An audit hook refusing any look at the held-out answer key: a fold is scored against its
    own truth file only, so the search never learns anything from the official targets."""
    heldout = os.path.realpath(heldout)

    def guard(event: str, args: tuple) -> None:
        if event in ("open", "os.listdir", "os.scandir") and args and isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.path.realpath(os.fsdecode(args[0]))
            if path == heldout or path.startswith(heldout + os.sep):
                raise PermissionError("evaluate.py read the held-out answer key while scoring a validation fold "
                                      "(with --truth it must read only the truth file it is given)")
    return guard


def _run_one(evaluate: str, predictions: str, truth: "str | None") -> dict:
    """One evaluate.py call, in this process: its own fresh globals, its output captured, its
    exit (SystemExit) caught. The sandbox refuses fork, so jobs no longer run in children; an
    evaluate.py that changes an imported module can only change its own later scores."""
    stdout, stderr = io.StringIO(), io.StringIO()
    saved = sys.stdout, sys.stderr, sys.argv
    sys.stdout, sys.stderr = stdout, stderr
    sys.argv = [evaluate, predictions] if truth is None else [evaluate, predictions, "--truth", truth]
    code = 0
    try:
        runpy.run_path(evaluate, run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            stderr.write(str(exc.code))
    except BaseException:  # noqa: BLE001 - reported like an interpreter would
        import traceback

        traceback.print_exc(file=stderr)
        code = 1
    finally:
        sys.stdout, sys.stderr, sys.argv = saved
    return {"exit": code, "stdout": stdout.getvalue()[-20000:], "stderr": stderr.getvalue()[-20000:]}


def main(argv: list) -> int:
    evaluate, jobs_path = argv[1], argv[2]
    sys.path.insert(0, os.path.dirname(os.path.abspath(evaluate)))
    _preload()
    with open(jobs_path) as f:
        jobs = json.load(f)
    if jobs and all(job.get("truth") for job in jobs):  # validation folds only: no answer key, ever
        sys.addaudithook(_answer_key_guard(os.path.join(os.path.dirname(os.path.abspath(evaluate)), "heldout")))
    results = [_run_one(evaluate, job["predictions"], job.get("truth")) for job in jobs]
    with open(argv[3], "w") as f:
        json.dump(results, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
