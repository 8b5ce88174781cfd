"""Embedding providers behind engram_core.ports.Embedder: the local ONNX model
(default), an OpenAI-compatible HTTP endpoint, and a hashing one for unit tests."""

from engram_embed.factory import EmbedSettings, make_embedder
from engram_embed.hashing import HashingEmbedder

__all__ = ["EmbedSettings", "HashingEmbedder", "make_embedder"]
