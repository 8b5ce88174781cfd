"""Profiles in recall: which one a recall runs with, and what each switch changes.

The timeline context step and the reranker's question-before read have their own tests
(recall/test_stage_neighbours.py, recall/test_stage_rerank.py, test_gateway_context.py).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from engram_core.errors import InvalidArgument
from engram_gateway.config import Settings
from engram_gateway.service import RecallMode, RecallRequest
from engram_gateway.service.models import QueryModels
from engram_gateway.service.recall import plan_recall
from engram_gateway.service.recall.config import ReadConfig

NOW = datetime(2025, 6, 1, tzinfo=UTC)


def planned(harness: Any, tenant: str = "acme", **kw: Any) -> str:
    """The profile a recall by ``tenant`` of ``RecallRequest("tea", **kw)`` runs with."""
    config: ReadConfig = harness.gateway.reader._config
    plan = plan_recall(RecallRequest("tea", **kw), config, QueryModels(), NOW, tenant)
    return plan.profile


def test_the_request_wins_over_the_tenant_and_the_tenant_over_the_gateway(
    new_harness: Any,
) -> None:
    h = new_harness(profile="default", tenant_profiles={"chats": "conversation"})
    assert planned(h, "acme") == "default"
    assert planned(h, "chats") == "conversation"
    assert planned(h, "chats", profile="default") == "default"
    assert planned(h, "acme", profile="conversation") == "conversation"
    assert planned(new_harness(profile="conversation"), "acme") == "conversation"


def test_out_of_the_box_a_recall_runs_the_default_profile(harness: Any) -> None:
    assert planned(harness) == "default"


def test_an_unknown_profile_in_a_request_names_the_field(harness: Any) -> None:
    with pytest.raises(InvalidArgument) as err:
        planned(harness, profile="chat")
    assert err.value.field == "profile"


@pytest.mark.parametrize(
    ("settings", "named"),
    [({"profile": "chat"}, "profile"), ({"tenant_profiles": {"acme": "chat"}}, "tenant_profiles")],
)
def test_an_unknown_profile_in_the_settings_stops_the_start(
    settings: dict[str, Any], named: str
) -> None:
    with pytest.raises(ValidationError, match=named):
        Settings(**settings)


def test_the_tenant_profiles_setting_is_a_json_object(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENGRAM_GATEWAY_TENANT_PROFILES", '{"chats": "conversation"}')
    assert Settings().tenant_profiles == {"chats": "conversation"}


def test_the_profile_is_in_the_cache_key(harness: Any) -> None:
    config: ReadConfig = harness.gateway.reader._config
    keys = {
        plan_recall(RecallRequest("tea", profile=p), config, QueryModels(), NOW).fingerprint()
        for p in ("default", "conversation")
    }
    assert len(keys) == 2


async def test_the_scoring_request_names_the_tenants_profile(new_harness: Any) -> None:
    h = new_harness(tenant_profiles={"acme": "conversation"})
    assert h.tenant == "acme"
    h.world.put(h.memory("0190f3a4-7b1c-7d2e-8f00-0000000000a1", "tea"))
    await h.recall("tea")
    await h.recall("tea", profile="default")
    assert [c["profile"] for c in h.ranker.calls] == ["conversation", "default"]


async def test_graph_seeds_are_read_with_the_profiles_concepts(harness: Any) -> None:
    h = harness
    query = "what did they say about mental health"
    for profile in ("default", "conversation"):
        await h.recall(query, mode=RecallMode.GRAPH, profile=profile)
    seeds = [arg[0] for op, arg in h.graph.calls if op == "search"]
    assert seeds == [(), ("concepts:mental-health",)]


async def test_decomposition_reads_names_with_the_profiles_rules(harness: Any) -> None:
    h = harness
    query = "Did Adoption and Meditation both help?"
    searched: dict[str, list[str]] = {}
    for profile in ("default", "conversation"):
        h.lexical.calls.clear()
        await h.recall(query, decompose=True, profile=profile)
        searched[profile] = [arg[0] for op, arg in h.lexical.calls if op == "search"]
    # Capitalised and in no lexicon of its own, each reads as a person to split on; the
    # conversation profile's concept list knows them as topics.
    assert searched["default"] == [query, "Did Adoption help?", "Did Meditation help?"]
    assert searched["conversation"] == [query]
