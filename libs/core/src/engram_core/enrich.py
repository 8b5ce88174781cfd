"""A memory as the stores get it: entity tags, tag prefixes, model name, log version.

Ingest applies it to every event; Sync and Rebuild (consolidate) to every log state they replay,
so a replayed memory is the one ingest wrote."""

from __future__ import annotations

from dataclasses import replace

from engram_core.entities import extract_entities
from engram_core.model import Entity, Memory
from engram_core.tags import normalise_tag, tag_prefixes


def enrich(memory: Memory, sequence: int, embedding_model: str) -> tuple[Memory, list[Entity]]:
    """Re-extract entities from the content and make the tags agree with them.

    An updated memory arrives whole, with the entity tags of its previous extraction;
    those (named by its ``entities``) are dropped first so an entity no longer in the
    content loses its tag. Tags the client gave itself are kept as they are.
    """
    entities = extract_entities(memory.content)
    previous = {f"entity:{key}" for key in memory.entities}
    tags: dict[str, None] = {}
    for tag in memory.tags:
        norm = normalise_tag(tag)
        if norm and norm not in previous:
            tags[norm] = None
    for entity in entities:
        tags[entity.tag] = None
    enriched = replace(
        memory,
        tags=tuple(tags),
        tag_prefixes=tag_prefixes(tags),
        entities=tuple(e.key for e in entities),
        embedding_model=embedding_model,
        version=sequence,
    )
    return enriched, entities
