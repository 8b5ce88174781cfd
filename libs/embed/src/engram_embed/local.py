"""The default provider: the model built by ``make models``, run with onnxruntime."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from engram_core.errors import Unavailable
from engram_embed.paths import MANIFEST_FILE, MODEL_FILE, TOKENIZER_FILE

OUTPUT = "sentence_embedding"


class OnnxEmbedder:
    """A model built by ``make models`` (bge-small-en-v1.5 int8 or fp32, all-MiniLM-L6-v2) on
    onnxruntime's CPU provider. The manifest names the model and its query instruction.

    Loads eagerly, so a missing or broken model fails at startup rather than
    on the first request.
    """

    def __init__(
        self,
        model_dir: Path,
        *,
        batch_size: int = 16,
        threads: int = 1,
        max_tokens: int = 256,
        query_instruction: str | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self._batch_size = batch_size
        self._session, self._tokenizer = load_onnx(model_dir, threads, "embedding")
        model_path = model_dir / MODEL_FILE
        # The file's own truncation/padding settings are the exporter's, not ours:
        # pad each batch to its longest text only, and cut long texts.
        self._tokenizer.enable_truncation(max_tokens)
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        self._input_names = {i.name for i in self._session.get_inputs()}
        out = {o.name: o for o in self._session.get_outputs()}
        if OUTPUT not in out:
            raise Unavailable(f"{model_path} has no {OUTPUT!r} output: run `make models`")
        self._dimension = int(out[OUTPUT].shape[-1])
        manifest = _manifest(model_dir)
        self._model_name = model_name_of(model_dir, manifest)
        self._query_instruction = (
            str(manifest.get("query_instruction", ""))
            if query_instruction is None
            else query_instruction
        )
        # One inference at a time: each run already uses every intra-op thread, and
        # concurrent runs would only contend for the cores and multiply memory.
        self._lock = threading.Lock()

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def dimension(self) -> int:
        return self._dimension

    @property
    def query_instruction(self) -> str:
        return self._query_instruction

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        if not texts:
            return []
        return await asyncio.to_thread(self.embed_sync, list(texts))

    def embed_sync(self, texts: Sequence[str]) -> list[list[float]]:
        """The blocking path, for benchmarks and batch tools outside an event loop."""
        # Sorting by length makes batches of similar lengths, so little compute goes
        # on padding; results are put back in the caller's order.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), self._dimension), dtype=np.float32)
        for start in range(0, len(order), self._batch_size):
            idx = order[start : start + self._batch_size]
            out[idx] = self._run([texts[i] for i in idx])
        vecs: list[list[float]] = out.tolist()
        return vecs

    def _run(self, batch: list[str]) -> npt.NDArray[np.float32]:
        try:
            encs = self._tokenizer.encode_batch(batch)
            ids = np.array([e.ids for e in encs], dtype=np.int64)
            feed = {
                "input_ids": ids,
                "attention_mask": np.array([e.attention_mask for e in encs], dtype=np.int64),
                "token_type_ids": np.zeros_like(ids),
            }
            feed = {k: v for k, v in feed.items() if k in self._input_names}
            with self._lock:
                (vecs,) = self._session.run([OUTPUT], feed)
        except Exception as e:  # onnxruntime raises its own exception types
            raise Unavailable(f"embedding model failed: {e}") from e
        arr: npt.NDArray[np.float32] = np.asarray(vecs, dtype=np.float32)
        # The graph already normalises; again here so the contract holds for any model file.
        norms = np.maximum(np.linalg.norm(arr, axis=1, keepdims=True), 1e-12).astype(np.float32)
        unit: npt.NDArray[np.float32] = arr / norms
        return unit


def load_onnx(model_dir: Path, threads: int, what: str) -> tuple[Any, Any]:
    """The folder's ONNX session (CPU, ``threads`` intra-op threads) and its tokenizer; a
    missing or unloadable file is ``Unavailable`` naming ``what`` model and the remedy."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    model_path, tokenizer_path = model_dir / MODEL_FILE, model_dir / TOKENIZER_FILE
    for path in (model_path, tokenizer_path):
        if not path.is_file():
            raise Unavailable(f"{what} model file {path} is missing: run `make models`")
    try:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads  # 0: onnxruntime picks (one per core)
        opts.inter_op_num_threads = 1
        # Idle pool threads would otherwise spin on cores the other services need.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = ort.InferenceSession(
            str(model_path), sess_options=opts, providers=["CPUExecutionProvider"]
        )
        tokenizer = Tokenizer.from_file(str(tokenizer_path))
    except Exception as e:  # onnxruntime and tokenizers raise their own types
        raise Unavailable(f"cannot load {what} model from {model_dir}: {e}") from e
    return session, tokenizer


def model_name_of(model_dir: Path, manifest: dict[str, Any] | None = None) -> str:
    """The name a built model's manifest gives it (the folder's name without one)."""
    found = _manifest(model_dir) if manifest is None else manifest
    return str(found.get("model_name", model_dir.name))


def _manifest(model_dir: Path) -> dict[str, Any]:
    try:
        manifest = json.loads((model_dir / MANIFEST_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return manifest if isinstance(manifest, dict) else {}
