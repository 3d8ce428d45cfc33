"""trellis_train: the helper a training program imports, inside the sandbox.

Trellis copies this file next to the program (it is not importable from the engine's side of
the sandbox, and imports nothing but the standard library). A program that imports it is run as
a training job: what it reports becomes live curves, what it saves becomes checkpoints kept by
the run, and when the job is resumed (after a pause, a cancel or a killed worker) the program is
handed its last checkpoint.

    import trellis_train as tt

    device = tt.device()                       # "cuda" when the job was given a GPU, else "cpu"
    start = 0
    if (path := tt.resume_path()) is not None:  # a resumed job: continue where it stopped
        state = torch.load(path); model.load_state_dict(state["model"]); start = state["epoch"] + 1
    for epoch in range(start, EPOCHS):
        ...
        tt.report(epoch=epoch, epochs=EPOCHS, loss=loss, val=val_loss, lr=lr)
        with tt.saving(epoch=epoch) as path:      # written to a temporary name, then put in place
            torch.save({"model": model.state_dict(), "epoch": epoch}, path)
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import time

JOB_FILE = ".trellis_job.json"          # written by Trellis: the device, the checkpoint handed back
METRICS_FILE = "training/metrics.jsonl"  # one JSON object per report() or saved checkpoint
CHECKPOINT_DIR = "training/checkpoints"
RESUME_DIR = "training/resume"
CHECKPOINT_NAME = "checkpoint.pt"

_job_cache: dict | None = None


def _job() -> dict:
    global _job_cache
    if _job_cache is None:
        try:
            with open(JOB_FILE, encoding="utf-8") as fh:
                _job_cache = json.load(fh)
        except (OSError, ValueError):
            _job_cache = {}  # run outside Trellis: plain CPU, nothing to resume
    return _job_cache


_device_cache: str | None = None


def device() -> str:
    """The device this job runs on: "cuda" where Trellis gave it a GPU and torch sees one, else
    "cpu" (the sandbox may hide a GPU the machine has). Trellis is told which it was."""
    global _device_cache
    if _device_cache is None:
        _device_cache = "cpu"
        if _job().get("device", "cpu") == "cuda":
            try:
                import torch

                _device_cache = "cuda" if torch.cuda.is_available() else "cpu"
            except ImportError:
                pass
        _append({"device": _device_cache})
    return _device_cache


def _pin_gpu() -> None:
    """The GPU of the training worker that runs this job (CUDA_VISIBLE_DEVICES of its process),
    set before torch first touches CUDA: the sandbox gives the program an environment of its own."""
    visible = _job().get("cuda_visible_devices")
    if isinstance(visible, str) and visible and "CUDA_VISIBLE_DEVICES" not in os.environ:
        os.environ["CUDA_VISIBLE_DEVICES"] = visible


def resume_path(name: str | None = None) -> str | None:
    """The checkpoint to continue from when this job is a resumed one (the last one it saved,
    whatever its name; or the one called ``name``), else None."""
    name = name or _job().get("resume")
    if not name:
        return None
    path = os.path.join(RESUME_DIR, os.path.basename(name))
    return path if os.path.isfile(path) else None


def resumed_epoch() -> int | None:
    """The epoch the handed checkpoint was saved at, as reported when it was saved."""
    epoch = _job().get("resumed_epoch")
    return epoch if isinstance(epoch, int) else None


def _number(value: object) -> float | None:
    if callable(getattr(value, "detach", None)):  # a torch tensor still in the graph
        value = value.detach()
    try:
        number = float(value)  # numpy and torch scalars too
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _append(entry: dict) -> None:
    os.makedirs(os.path.dirname(METRICS_FILE), exist_ok=True)
    with open(METRICS_FILE, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry) + "\n")
        fh.flush()


def report(epoch: int | None = None, *, loss: object = None, val: object = None, lr: object = None,
           step: int | None = None, epochs: int | None = None, **extra: object) -> None:
    """One point of the training curves: the epoch (or step), the training loss, the validation
    score, the learning rate, how many epochs are planned (for the ETA), and any other numbers."""
    entry: dict = {"t": time.time()}
    for key, value in (("epoch", epoch), ("step", step), ("epochs", epochs)):
        if value is not None:
            entry[key] = int(value)
    for key, value in (("loss", loss), ("val", val), ("lr", lr)):
        if (number := _number(value)) is not None:
            entry[key] = number
    numbers = {str(k)[:40]: n for k, v in list(extra.items())[:20] if (n := _number(v)) is not None}
    if numbers:
        entry["extra"] = numbers
    _append(entry)


@contextlib.contextmanager
def saving(name: str = CHECKPOINT_NAME, *, epoch: int | None = None):
    """Yield a temporary path to write a checkpoint to; on success it replaces the checkpoint
    ``name`` at once (a reader never sees half a file) and Trellis keeps a copy."""
    os.makedirs(CHECKPOINT_DIR, exist_ok=True)
    final = os.path.join(CHECKPOINT_DIR, os.path.basename(name))
    partial = final + ".partial"
    yield partial
    os.replace(partial, final)
    entry: dict = {"t": time.time(), "checkpoint": os.path.basename(name)}
    if epoch is not None:
        entry["epoch"] = int(epoch)
    _append(entry)


_pin_gpu()
