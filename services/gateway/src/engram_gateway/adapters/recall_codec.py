"""Recall answers as RecallResponse bytes for the (shared) recall cache."""

from __future__ import annotations

from engram.gateway.v1 import gateway_pb2
from engram_gateway.mapping import recall_result_from_proto, recall_result_to_proto
from engram_gateway.service.ports import RecallResult


class ProtoRecallCodec:
    def encode(self, result: RecallResult) -> bytes:
        return recall_result_to_proto(result).SerializeToString()

    def decode(self, data: bytes) -> RecallResult:
        return recall_result_from_proto(gateway_pb2.RecallResponse.FromString(data))
