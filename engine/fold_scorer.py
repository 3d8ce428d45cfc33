"""Score several prediction files with a task's evaluate.py in one process.

Runs beside the task folder, outside every sandbox, like evaluate.py itself (it is the task
author's code). Usage: ``python fold_scorer.py EVALUATE_PY JOBS_JSON RESULTS_JSON`` where
JOBS_JSON lists ``{"predictions": path, "truth": path}`` (``"truth": null`` scores against the
held-out answer key: the official scoring after a final commitment, never a validation fold);
RESULTS_JSON receives, in order, one
``{"exit": code, "stdout": "...", "stderr": "..."}`` per job (a file, not stdout, which an
evaluate.py could write to around Python).

Why one process: evaluate.py scripts import numpy and pandas, which costs this machine most of
a second; a validation scores five folds, every probe of a search. The common modules are
imported once here and each job runs in a forked child, so one job cannot change what the next
sees (an evaluate.py that keeps state between calls, or exits the interpreter).
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
    out_r, out_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: run evaluate.py as a script, its output into the pipe as JSON
        os.close(out_r)
        stdout, stderr = io.StringIO(), io.StringIO()
        sys.stdout, sys.stderr = stdout, stderr
        if truth is None:  # official: evaluate.py reads its own held-out key
            sys.argv = [evaluate, predictions]
        else:
            sys.argv = [evaluate, predictions, "--truth", truth]
            sys.addaudithook(_answer_key_guard(os.path.join(os.path.dirname(os.path.abspath(evaluate)), "heldout")))
        code = 0
        try:
            runpy.run_path(evaluate, run_name="__main__")
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
            if exc.code is not None and not isinstance(exc.code, int):
                stderr.write(str(exc.code))
        except BaseException as exc:  # noqa: BLE001 - reported like an interpreter would
            import traceback

            traceback.print_exc(file=stderr)
            code = 1
        data = json.dumps({"exit": code, "stdout": stdout.getvalue()[-20000:],
                           "stderr": stderr.getvalue()[-20000:]}).encode()
        with os.fdopen(out_w, "wb") as f:
            f.write(data)
        os._exit(0)
    os.close(out_w)
    with os.fdopen(out_r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    try:
        return json.loads(data)
    except ValueError:
        return {"exit": 1, "stdout": "", "stderr": "evaluate.py ended without a result"}


def main(argv: list) -> int:
    evaluate, jobs_path = argv[1], argv[2]
    sys.path.insert(0, os.path.dirname(os.path.abspath(evaluate)))
    _preload()
    with open(jobs_path) as f:
        jobs = json.load(f)
    results = [_run_one(evaluate, job["predictions"], job.get("truth")) for job in jobs]
    with open(argv[3], "w") as f:
        json.dump(results, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
