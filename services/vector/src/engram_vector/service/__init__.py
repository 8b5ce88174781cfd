"""Vector service logic over ports (engram_core): no gRPC, no backend imports."""

from engram_vector.service.vector_service import VectorService

__all__ = ["VectorService"]
