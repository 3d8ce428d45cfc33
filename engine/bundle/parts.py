"""What the champion bundle is made of, read from the run's folder and the task.

Every file of the run is read through ``open_output`` (each path component opened with
O_NOFOLLOW, a regular file with one link, under a size cap): a link left in the run folder,
by a program or by anyone, never takes a file from outside it into a bundle.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ..protocol.events import CodeExecution, ToolCall, TrainingStarted
from ..sandbox import ExecutionRequest, UnsafeOutput, open_output
from ..task import Task
from ..trace import Event, trace_attempts
from ..training.folder import JobState, job_key
from ..training.jobs import is_training_program
from ..validation import input_columns, plan_from_dict

MAX_STATE_BYTES = 16 * 1024 * 1024
MAX_TRACE_BYTES = 256 * 1024 * 1024


class PartMissing(Exception):
    """A part of the bundle that cannot be made; the message says why (the README lists it)."""


def read_run_file(run_dir: Path, rel: str, max_bytes: int) -> bytes:
    """A file of the run, never through a link. Raises PartMissing with the reason."""
    try:
        with open_output(Path(run_dir), rel, max_bytes) as fh:
            return fh.read()
    except FileNotFoundError as exc:
        raise PartMissing(f"{rel} is not in the run folder") from exc
    except UnsafeOutput as exc:
        raise PartMissing(f"{rel} refused: {exc}") from exc
    except OSError as exc:
        raise PartMissing(f"{rel} unreadable: {exc}") from exc


# --- predictions beside their truth -------------------------------------------------------------
@dataclass
class Pairs:
    """Predictions beside the truth they are compared with, one row per id."""

    label: str                          # "in-loop validation folds" or "held-out (official)"
    id_name: str = "id"                 # the task's id column, or train_row (row number in the training file)
    ids: list[str] = field(default_factory=list)
    truth: list[str] = field(default_factory=list)
    prediction: list[str] = field(default_factory=list)
    fold: list[int] = field(default_factory=list)   # validation only: the fold of each row (1-based)
    features: list[str] = field(default_factory=list)   # the inputs, when the task has one or two
    x: list[list[str]] = field(default_factory=list)    # their values on each row
    unmatched: int = 0                  # truth rows with no prediction

    def numeric(self) -> tuple[list[float], list[float]] | None:
        """(truth, prediction) as numbers, or None when either column is not all finite numbers."""
        try:
            t, p = [float(v) for v in self.truth], [float(v) for v in self.prediction]
        except ValueError:
            return None
        return (t, p) if all(math.isfinite(v) for v in t + p) else None

    def rows(self) -> list[dict]:
        nums = self.numeric()
        out = []
        for k, i in enumerate(self.ids):
            row = {self.id_name: i}
            if self.fold:
                row["fold"] = self.fold[k]
            row.update(zip(self.features, self.x[k] if self.features else []))
            row.update({"truth": self.truth[k], "prediction": self.prediction[k]})
            if nums is not None:
                row["residual"] = repr(nums[1][k] - nums[0][k])
            out.append(row)
        return out

    def csv_bytes(self) -> bytes:
        rows = self.rows()
        buf = io.StringIO()
        if rows:
            w = csv.DictWriter(buf, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
        return buf.getvalue().encode()


def id_key(value: object) -> str:
    """An id as written by any program: "3", "3.0" and " 3" are the same row."""
    text = str(value).strip()
    try:
        number = float(text)
    except ValueError:
        return text
    return str(int(number)) if math.isfinite(number) and number == int(number) else text


def parse_predictions(task: Task, text: str) -> dict[str, str]:
    """``{id: predicted target}`` from a predictions CSV; PartMissing when it has not the columns."""
    r = task.resources
    reader = csv.DictReader(io.StringIO(text))
    fields = reader.fieldnames or []
    if r.id_column not in fields or r.target not in fields:
        raise PartMissing(f"predictions have no `{r.id_column}` and `{r.target}` columns (columns: {fields[:8]})")
    return {id_key(row[r.id_column]): str(row[r.target]).strip() for row in reader}


def _plotted_features(task: Task) -> list[str]:
    """The inputs residuals are drawn against: the task's one input, or its two (a map)."""
    try:
        columns = input_columns(task)
    except (OSError, ValueError):
        return []
    return columns if len(columns) in (1, 2) else []


def validation_pairs(task: Task, run_dir: Path, folds_rel: str) -> Pairs:
    """The champion's predictions on every in-loop validation fold beside the training targets
    they were scored against (never the held-out truth): the folds' own split, rebuilt from the
    seed and plan the search used."""
    kept = json.loads(read_run_file(run_dir, folds_rel, 64 * 1024 * 1024))
    plan = plan_from_dict(kept["plan"]) if isinstance(kept.get("plan"), dict) else task.assessment().plan()
    truth_rows = task.assessment().validation_rows(int(kept.get("seed") or 0), plan)
    folds = kept.get("folds") or []
    if len(folds) != len(truth_rows):
        raise PartMissing(f"{len(folds)} fold(s) of predictions kept, but the split has {len(truth_rows)}")
    r, features = task.resources, _plotted_features(task)
    pairs = Pairs("in-loop validation folds", id_name="train_row", features=features)
    for k, (text, rows) in enumerate(zip(folds, truth_rows), start=1):
        if not isinstance(text, str):
            raise PartMissing(f"validation fold {k}'s predictions were not kept (none, a link, or over the cap)")
        predicted = parse_predictions(task, text)
        for i, (train_row, row) in enumerate(rows):
            if str(i) not in predicted:
                pairs.unmatched += 1
                continue
            pairs.ids.append(str(train_row))
            pairs.fold.append(k)
            pairs.truth.append(str(row[r.target]).strip())
            pairs.prediction.append(predicted[str(i)])
            pairs.x.append([str(row.get(f, "")) for f in features])
    if not pairs.ids:
        raise PartMissing("no validation prediction matches a validation row")
    return pairs


def heldout_pairs(task: Task, predictions: bytes, truth: dict[str, str]) -> Pairs:
    """The predictions the champion wrote at the final commitment beside the held-out answer
    key: made only after the final commitment, for the plot labelled held-out (official)."""
    predicted = parse_predictions(task, predictions.decode("utf-8", errors="replace"))
    features = _plotted_features(task)
    xs: dict[str, list[str]] = {}
    if features:
        with (task.folder / task.resources.files["test_features"]).open(newline="", encoding="utf-8") as fh:
            xs = {id_key(row[task.resources.id_column]): [str(row.get(f, "")) for f in features]
                  for row in csv.DictReader(fh)}
    pairs = Pairs("held-out (official)", id_name=task.resources.id_column or "id", features=features)
    for i, target in truth.items():
        k = id_key(i)
        if k not in predicted:
            pairs.unmatched += 1
            continue
        pairs.ids.append(k)
        pairs.truth.append(target)
        pairs.prediction.append(predicted[k])
        pairs.x.append(xs.get(k, [""] * len(features)))
    if not pairs.ids:
        raise PartMissing("no prediction matches an id of the held-out answer key")
    return pairs


# --- the champion's training job ----------------------------------------------------------------
@dataclass
class Job:
    key: str
    state: JobState
    found_by: str       # "job key of the final commitment" or "the trace's training events"


def _job_state(run_dir: Path, key: str) -> JobState | None:
    if not re.fullmatch(r"[0-9a-f]{16}", key):
        return None
    try:
        return JobState.from_dict(json.loads(read_run_file(run_dir, f"training/{key}/state.json", MAX_STATE_BYTES)))
    except (PartMissing, ValueError, TypeError):
        return None


def _job_from_trace(run_dir: Path, node_id: str) -> str | None:
    """The job started while the champion ran at the final commitment, as the search traced it."""
    key = None
    for _, path in trace_attempts(run_dir, "search"):
        try:
            text = read_run_file(run_dir, path.name, MAX_TRACE_BYTES).decode("utf-8", errors="replace")
        except PartMissing:
            continue
        inside = False
        for line in text.splitlines():
            try:
                event = Event.from_dict(json.loads(line))
            except (ValueError, KeyError, TypeError):  # not one event (a torn line)
                continue
            if event.kind not in ("tool_call", "code_execution", "training_started"):
                continue
            p = event.typed
            if p is None:  # a call that does not read as one is no call of the champion
                inside = inside and event.kind != "tool_call"
                continue
            if isinstance(p, ToolCall):
                inside = p.purpose == "final commitment" and p.node == node_id
            elif isinstance(p, CodeExecution) and p.purpose == "final commitment":
                inside = False
            elif inside and isinstance(p, TrainingStarted):
                key = p.job  # the last one: a resumed search may have run it again
    return key


def champion_job(task: Task, run_dir: Path, node_id: str, code: str) -> Job | None:
    """The training job of the champion's run on the task's data; None when its program is not
    a training job, PartMissing when it is one but no job of it is in the run folder."""
    if not is_training_program(code):
        return None
    request = ExecutionRequest(code=code, input_files=task.input_files(), limits=task.resources.limits)
    key = job_key(request)
    state = _job_state(run_dir, key)
    if state is not None:
        return Job(key, state, "job key of the final commitment")
    traced = _job_from_trace(run_dir, node_id)
    state = _job_state(run_dir, traced) if traced else None
    if state is None:
        raise PartMissing(f"the champion's program is a training job, but no readable state of it (job {key}) "
                          "is in the run folder")
    return Job(traced, state, "the trace's training events")


def safe_name(name: str, default: str = "checkpoint.bin") -> str:
    """A checkpoint's file name fit for a zip: its base name, plain characters only."""
    base = re.sub(r"[^A-Za-z0-9._-]", "_", os.path.basename(str(name)))[:100].lstrip(".")
    return base or default


def copy_checkpoint(run_dir: Path, job: Job, dest: BinaryIO, max_bytes: int) -> dict:
    """Copy the job's last checkpoint into ``dest``, checking it against its recorded hash."""
    ck = job.state.checkpoint or {}
    sha = str(ck.get("sha256") or "")
    if not re.fullmatch(r"[0-9a-f]{64}", sha):
        raise PartMissing("the training job kept no checkpoint")
    rel = f"training/{job.key}/checkpoints/{sha[:2]}/{sha}"
    h, size = hashlib.sha256(), 0
    try:
        with open_output(Path(run_dir), rel, max_bytes) as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
                dest.write(chunk)
                size += len(chunk)
    except FileNotFoundError as exc:
        raise PartMissing(f"checkpoint {sha[:12]} is missing from the job's store") from exc
    except UnsafeOutput as exc:
        raise PartMissing(f"checkpoint {sha[:12]} left out: {exc}") from exc
    if h.hexdigest() != sha:
        raise PartMissing(f"checkpoint {sha[:12]} does not match its recorded hash")
    return {"sha256": sha, "bytes": size, "epoch": ck.get("epoch"), "name": safe_name(ck.get("name", ""))}
