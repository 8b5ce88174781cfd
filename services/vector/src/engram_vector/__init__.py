"""The vector service: owns the vector store (embedded Qdrant Edge, or a Qdrant server)."""
