"""Pure logic of the lexical service, over engram_core ports."""

from engram_lexical.service.lexical import LexicalService, Limits

__all__ = ["LexicalService", "Limits"]
