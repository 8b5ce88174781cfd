"""A memory as the stores get it: entity tags, tag prefixes, model name, log version.

Ingest applies it to every event; Sync and Rebuild (consolidate) to every log state they replay,
so a replayed memory is the one ingest wrote."""

from __future__ import annotations

from dataclasses import replace

from engram_core.entities import EntityRules, extract_entities
from engram_core.limits import entity_tag_room
from engram_core.model import Entity, Memory
from engram_core.tags import normalise_tag, tag_prefixes, tag_problem


def enrich(
    memory: Memory, sequence: int, embedding_model: str, rules: EntityRules | None = None
) -> tuple[Memory, list[Entity]]:
    """Re-extract entities from the content (with ``rules``, by default the conversation
    profile's) and make the tags agree with them.

    An updated memory arrives whole, with the entity tags of its previous extraction;
    those (named by its ``entities``) are dropped first so an entity no longer in the
    content loses its tag. Tags the client gave itself are kept as they are.

    The result stays inside ``engram_core.limits``: an entity whose tag would not be a valid
    tag (too long: a pasted base64 header, a long class name) is no entity, and only as many
    entities are kept, in the extractor's order, as ``entity_tag_room`` leaves beside the
    client's tags.
    """
    previous = {f"entity:{key}" for key in memory.entities}
    tags: dict[str, None] = {}
    for tag in memory.tags:
        norm = normalise_tag(tag)
        if norm and norm not in previous:
            tags[norm] = None
    entities = _within_room(extract_entities(memory.content, rules), tags)
    tags.update(dict.fromkeys(e.tag for e in entities))
    enriched = replace(
        memory,
        tags=tuple(tags),
        tag_prefixes=tag_prefixes(tags),
        entities=tuple(e.key for e in entities),
        embedding_model=embedding_model,
        version=sequence,
    )
    return enriched, entities


def _within_room(found: list[Entity], client_tags: dict[str, None]) -> list[Entity]:
    """The entities to keep; one whose tag the client already gave takes no room."""
    room = entity_tag_room(len(client_tags))
    kept: list[Entity] = []
    added = 0
    for entity in found:
        if tag_problem(entity.tag) is not None:
            continue
        if entity.tag not in client_tags:
            if added == room:
                continue
            added += 1
        kept.append(entity)
    return kept
