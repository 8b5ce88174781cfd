"""The Grafana dashboard and the Prometheus alerts query only what the services serve.

The embedded stack is driven through everything they chart (a store, recalls, a degraded
recall, a dead letter, a requested consolidation pass and a skipped scheduled one), every
service's /metrics is scraped, and each metric (and each label value a selector names) of
deploy/grafana/engram.json and deploy/prometheus/alerts.yaml is looked up in the scrape.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeAlias

import grpc
import promql_parser
import pytest
import yaml  # type: ignore[import-untyped]
from google.protobuf.timestamp_pb2 import Timestamp
from prometheus_client.parser import text_string_to_metric_families

from engram.common.v1 import common_pb2
from engram.gateway.v1 import admin_pb2, admin_pb2_grpc, gateway_pb2, gateway_pb2_grpc
from engram_platform import jetstream as jsm
from engram_platform.settings import NatsSettings
from engram_testing.devstack import START_ORDER, DevStack
from engram_testing.e2e import AUTH, Stub, recall

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "engram.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yaml"
# Series Prometheus makes itself, and labels it adds to every scraped one.
PROMETHEUS_SERIES = {"up"}
PROMETHEUS_LABELS = {"namespace", "job", "instance", "pod"}
# What Grafana puts in for its variables, so the expressions parse as Prometheus sees them.
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$namespace": ".*"}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and"}
KEYWORDS |= {"or", "unless", "offset", "inf", "nan"}

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGE = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
# A whole identifier that is not a function call (a name followed by "(").
_IDENT = re.compile(r"(?<![\w.:])([A-Za-z_:][\w:]*)(?![\w:])(?!\s*\()")
_SELECTOR = re.compile(r"(?<![\w.:])([A-Za-z_:][\w:]*)\s*\{([^}]*)\}")
_MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
_LABEL_VALUES = re.compile(r"label_values\(\s*([A-Za-z_:][\w:]*)\s*,")

TENANT_PROBE = "opsprobe"  # the undecodable event's tenant, so no suite's dead letters see it
CONTENT = "Wilhelmina stores the tide tables for the harbour pilots in the red binder"
QUERY = "where are the tide tables for the harbour pilots"
# Associate every second, the other passes only on request: once a scheduled associate run
# has linked what it found, the next one finds the tenant unchanged and is skipped (decay
# has no such skip).
FAST_ASSOCIATE = {
    "ENGRAM_CONSOLIDATE_SCHEDULE__TICK_S": "0.5",
    "ENGRAM_CONSOLIDATE_SCHEDULE__DECAY_INTERVAL_S": "0",
    "ENGRAM_CONSOLIDATE_SCHEDULE__ASSOCIATE_INTERVAL_S": "1",
    "ENGRAM_CONSOLIDATE_SCHEDULE__CLUSTER_INTERVAL_S": "0",
}

AdminStub: TypeAlias = "admin_pb2_grpc.AdminServiceAsyncStub"  # exists in the stubs only
Scrape = dict[str, list[dict[str, str]]]  # sample name -> the label sets it is served with


def substituted(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    return expr


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects: what is left once strings, label matchers,
    ranges and grouping label lists are cut out, less function names and keywords."""
    rest = _STRING.sub('""', expr)
    for pattern in (_MATCHERS, _RANGE, _GROUPING):
        rest = pattern.sub(" ", rest)
    return {m for m in _IDENT.findall(rest) if m not in KEYWORDS}


def selectors(expr: str) -> Iterator[tuple[str, str, str, str]]:
    """(metric, label, operator, value) of every matcher written in a selector."""
    for name, body in _SELECTOR.findall(expr):
        for label, op, value in _MATCHER.findall(body):
            yield name, label, op, value


def dashboard_panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        if panel.get("type") == "row":
            yield from dashboard_panels(panel.get("panels", []))
        else:
            yield panel


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def alert_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load(ALERTS.read_text())
    return [rule for group in doc["groups"] for rule in group["rules"]]


def expressions() -> dict[str, str]:
    """Every PromQL expression of both files, by where it is (for failure messages)."""
    found = {
        f"panel {p['title']!r} {t['refId']}": substituted(t["expr"])
        for p in dashboard_panels(dashboard()["panels"])
        for t in p["targets"]
    }
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"]
            found[f"variable {variable['name']}"] = " ".join(_LABEL_VALUES.findall(query))
    found.update({f"alert {r['alert']}": r["expr"] for r in alert_rules()})
    return found


def unserved(exprs: dict[str, str], scrape: Scrape) -> dict[str, set[str]]:
    missing = {
        where: metric_names(expr) - set(scrape) - PROMETHEUS_SERIES for where, expr in exprs.items()
    }
    return {where: names for where, names in missing.items() if names}


def unmatched(exprs: dict[str, str], scrape: Scrape) -> list[tuple[str, str, str, str]]:
    """Label matchers (= and =~ on the services' own labels) no served series satisfies."""
    out = []
    for where, expr in exprs.items():
        for name, label, op, value in selectors(expr):
            if op not in ("=", "=~") or label in PROMETHEUS_LABELS or name in PROMETHEUS_SERIES:
                continue
            pattern = re.escape(value) if op == "=" else value
            if not any(re.fullmatch(pattern, s.get(label, "")) for s in scrape.get(name, [])):
                out.append((where, name, label, value))
    return out


# ---- the files on their own ----


def test_the_dashboard_takes_its_data_source_as_a_variable_and_every_panel_queries() -> None:
    model = dashboard()
    variables = {v["name"]: v for v in model["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in model["panels"]]
    assert len(set(ids)) == len(ids)
    panels = list(dashboard_panels(model["panels"]))
    for panel in panels:
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip(), (panel["title"], target)
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
    titles = " ".join(p["title"] for p in model["panels"]).lower()
    for subject in ("recall", "degraded", "ingest", "watermark", "dead letters", "consolidation"):
        assert subject in titles, subject


def test_every_alert_rule_has_its_expression_wait_severity_and_summary() -> None:
    rules = alert_rules()
    assert len(rules) >= 6
    for rule in rules:
        assert rule["alert"].startswith("Engram"), rule
        assert rule["expr"].strip(), rule["alert"]
        assert re.fullmatch(r"\d+[smh]", str(rule["for"])), rule["alert"]
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"].strip(), rule["alert"]
        assert rule["annotations"]["description"].strip(), rule["alert"]


def test_every_expression_has_balanced_brackets() -> None:
    pairs = {")": "(", "]": "[", "}": "{"}
    for where, expr in expressions().items():
        stack: list[str] = []
        for char in _STRING.sub('""', expr):
            if char in "([{":
                stack.append(char)
            elif char in pairs:
                assert stack, (where, expr)
                assert stack.pop() == pairs[char], (where, expr)
        assert not stack, (where, expr)


def test_every_expression_parses_as_promql() -> None:
    for where, expr in expressions().items():
        if where.startswith("variable"):
            continue
        promql_parser.parse(expr)


def test_a_misspelled_metric_or_label_value_is_reported() -> None:
    scrape: Scrape = {
        "engram_ingest_watermark_lag": [{}],
        "engram_recall_answers_total": [{"outcome": "complete"}, {"outcome": "degraded"}],
    }
    exprs = {
        "ok": 'sum(rate(engram_recall_answers_total{outcome="degraded"}[5m])) > 0 '
        "and on (namespace) max by (namespace) (engram_ingest_watermark_lag) > 0",
        "typo": "max(engram_ingest_watermark_lags) > 0",
        "label": 'sum(rate(engram_recall_answers_total{outcome="degrade"}[5m]))',
    }
    assert unserved(exprs, scrape) == {"typo": {"engram_ingest_watermark_lags"}}
    assert unmatched(exprs, scrape) == [
        ("label", "engram_recall_answers_total", "outcome", "degrade")
    ]


# ---- against the running stack ----


def ts(moment: datetime) -> Timestamp:
    out = Timestamp()
    out.FromDatetime(moment)
    return out


def scrape_all(stack: DevStack) -> Scrape:
    out: Scrape = {}
    for name in START_ORDER:
        with urllib.request.urlopen(stack.metrics_url(name), timeout=10) as reply:
            text = reply.read().decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                out.setdefault(sample.name, []).append(dict(sample.labels))
    return out


def wait_served(stack: DevStack, service: str, metric: str, timeout_s: float = 120.0) -> None:
    """Until ``service`` serves a sample of ``metric`` (recorded by a task of its own)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with urllib.request.urlopen(stack.metrics_url(service), timeout=10) as reply:
            if f"\n{metric}" in reply.read().decode():
                return
        time.sleep(0.2)
    raise AssertionError(f"engram-{service} never served {metric}")


async def store_and_recall(gateway: Stub) -> None:
    # A month old, so the decay pass has a score to change.
    memory = common_pb2.MemoryInput(
        content=CONTENT, timestamp=ts(datetime.now(UTC) - timedelta(days=30))
    )
    stored = await gateway.Store(gateway_pb2.StoreRequest(memory=memory), metadata=AUTH)
    waited = await recall(gateway, query=QUERY, limit=3, min_sequence=stored.sequence)
    assert waited.results[0].memory.id == stored.id
    await recall(gateway, query=QUERY, limit=3)  # the cached answer


async def degraded_recall(stack: DevStack, gateway: Stub) -> None:
    stack.stop_service("lexical")
    try:
        reply = await recall(gateway, query="tide tables harbour pilots red binder", limit=3)
        assert "lexical" in reply.degraded
    finally:
        stack.start_service("lexical")


async def publish_undecodable(nats_url: str) -> None:
    nc, js = await jsm.connect(NatsSettings(url=nats_url), "e2e-operations")
    try:
        # 0xff: field 31 with wire type 7, which no protobuf parser accepts.
        await js.publish(jsm.subject(TENANT_PROBE, jsm.MEMORY_STORED), b"\xff\xff not an event")
    finally:
        await nc.close()


async def requested_decay(admin: AdminStub) -> None:
    mode = admin_pb2.CONSOLIDATION_MODE_DECAY
    started = await admin.Consolidate(admin_pb2.ConsolidateRequest(mode=mode), metadata=AUTH)
    for _ in range(600):
        status = await admin.ConsolidationStatus(
            admin_pb2.ConsolidationStatusRequest(), metadata=AUTH
        )
        run = next(p for p in status.passes if p.mode == mode).last_run
        if run.run_id == started.run_id and run.state == admin_pb2.PASS_STATE_SUCCEEDED:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"decay run {started.run_id} did not succeed")


def restart_consolidate(stack: DevStack, env: dict[str, str]) -> None:
    stack.stop_service("consolidate")
    stack.env = env
    stack.start_service("consolidate")


@pytest.fixture(scope="module")
def scraped(stack: DevStack) -> Scrape:
    async def drive() -> None:
        async with grpc.aio.insecure_channel(stack.gateway_address) as channel:
            gateway = gateway_pb2_grpc.MemoryServiceStub(channel)
            await store_and_recall(gateway)
            await degraded_recall(stack, gateway)
            await publish_undecodable(stack.nats_url)
            restart_consolidate(stack, {**before, **FAST_ASSOCIATE})
            await requested_decay(admin_pb2_grpc.AdminServiceStub(channel))

    before = stack.env
    try:
        asyncio.run(drive())
        wait_served(stack, "ingest", "engram_worker_dead_letters_total")
        wait_served(stack, "consolidate", "engram_consolidate_runs_skipped_total")
        return scrape_all(stack)
    finally:
        restart_consolidate(stack, before)  # no scheduled runs under the suites that follow


def test_every_metric_the_dashboard_and_the_alerts_query_is_served(scraped: Scrape) -> None:
    assert unserved(expressions(), scraped) == {}


def test_every_label_value_they_select_is_served(scraped: Scrape) -> None:
    assert unmatched(expressions(), scraped) == []
