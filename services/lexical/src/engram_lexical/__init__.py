"""engram-lexical: owns the text index (BM25) behind engram.lexical.v1.LexicalService."""
