"""Settings from arguments, else ENGRAM_* environment, else the dev stack of `make run`;
plain values into request messages."""

from __future__ import annotations

from datetime import datetime

import pytest

from engram.common.v1 import common_pb2
from engram.gateway.v1 import gateway_pb2
from engram_client.config import DEFAULT_ADDRESS, DEV_TOKEN, Config
from engram_client.convert import fill, memory_input


def test_with_nothing_set_it_talks_to_the_dev_stack() -> None:
    config = Config.resolve(env={})
    assert (config.address, config.token, config.tls) == (DEFAULT_ADDRESS, DEV_TOKEN, False)
    assert config.credentials() is None


def test_environment_then_arguments_win() -> None:
    env = {"ENGRAM_ADDR": "old:1", "ENGRAM_TOKEN": "t", "ENGRAM_TLS": "true"}
    assert Config.resolve(env=env).address == "old:1"
    env["ENGRAM_ADDRESS"] = "new:2"
    config = Config.resolve(env=env)
    assert (config.address, config.token, config.tls) == ("new:2", "t", True)
    assert Config.resolve("arg:3", "u", tls=False, env=env).token == "u"
    assert Config.resolve(env={"ENGRAM_TIMEOUT": "2.5"}).timeout_s == 2.5


def test_a_ca_turns_tls_on_and_a_cert_needs_its_key() -> None:
    assert Config.resolve(env={"ENGRAM_CA": "/ca.pem"}).tls
    with pytest.raises(ValueError, match="both"):
        Config.resolve(env={"ENGRAM_CERT": "/c.pem"})


def test_enums_take_short_names_and_unknown_fields_are_named() -> None:
    req = fill(
        gateway_pb2.RecallRequest(),
        {"tag_match": "prefix", "mode": "hybrid-graph", "focus": {"tags": ["db"], "pinned": True}},
    )
    assert req.tag_match == common_pb2.TAG_MATCH_PREFIX
    assert req.mode == gateway_pb2.RECALL_MODE_HYBRID_GRAPH
    assert list(req.focus.tags) == ["db"]
    assert req.focus.pinned
    with pytest.raises(TypeError, match="limt"):
        fill(gateway_pb2.RecallRequest(), {"limt": 3})
    with pytest.raises(ValueError, match="sideways"):
        fill(gateway_pb2.RecallRequest(), {"mode": "sideways"})


def test_memory_input_takes_iso_strings_and_skips_none() -> None:
    m = memory_input("c", t_valid="2025-03-01T00:00:00+00:00", importance=None)
    assert not m.HasField("importance")
    assert m.t_valid.ToDatetime().isoformat() == "2025-03-01T00:00:00"
    assert memory_input("c", timestamp=datetime(2025, 1, 1)).timestamp.seconds == 1735689600
