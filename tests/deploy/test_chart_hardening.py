"""The chart's hardening: the `restricted` Pod Security Standard, spread and anti-affinity,
a NetworkPolicy per component, metrics scraping and alerts, checksum rolls, KEDA on the
log's backlog, TLS everywhere; and every rendering, default and example, valid against the
Kubernetes schemas (kubeconform -strict)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

from engram_testing.devstack import SERVICE_NAMES, START_ORDER
from engram_testing.helm_chart import (
    CUSTOM_KINDS,
    EXAMPLES,
    Rendered,
    image_python,
    kubeconform,
    render,
    render_error,
)
from engram_testing.nats_server import free_ports

pytestmark = pytest.mark.chart

COMPONENTS = START_ORDER
TLS = ("tls.enabled=true", "tls.secretName=engram-tls")
EVERYTHING = (
    *TLS,
    "tls.clientAuth=require",
    "metrics.serviceMonitor.enabled=true",
    "metrics.prometheusRule.enabled=true",
    "ingest.keda.enabled=true",
    "podAntiAffinity=hard",
    "gateway.autoscaling.enabled=true",
    "tracing.exporter=otlp",
    "tracing.otlpEndpoint=http://collector:4317",
    "networkPolicy.gatewayFrom[0].namespaceSelector.matchLabels.team=agents",
)


def component_of(selector: dict[str, Any]) -> str:
    labels = selector["matchLabels"]
    assert labels["app.kubernetes.io/instance"] == "mem"
    return str(labels["app.kubernetes.io/component"])


# --- Pod security


def test_every_pod_meets_the_restricted_pod_security_standard() -> None:
    out = render(*EVERYTHING)
    pods = [out.pod(c) for c in COMPONENTS] + [p["spec"] for p in out.of("Pod").values()]
    for pod in pods:
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert not any(pod.get(f) for f in ("hostNetwork", "hostPID", "hostIPC"))
        assert all("hostPath" not in v for v in pod.get("volumes", []))
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["capabilities"] == {"drop": ["ALL"]}
            assert context["seccompProfile"] == {"type": "RuntimeDefault"}
            assert not context.get("privileged")


# --- Scheduling


def test_replicas_spread_over_zones_then_nodes_best_effort() -> None:
    out = render("vector.backend=edge", "vector.replicas=1")
    for component in COMPONENTS:
        constraints = out.pod(component).get("topologySpreadConstraints", [])
        if component == "vector":  # one replica on its volume: nothing to spread
            assert constraints == []
            continue
        assert [c["topologyKey"] for c in constraints] == [
            "topology.kubernetes.io/zone",
            "kubernetes.io/hostname",
        ]
        selector = out.deployment(component)["spec"]["selector"]
        for constraint in constraints:
            assert constraint["whenUnsatisfiable"] == "ScheduleAnyway"
            assert constraint["maxSkew"] == 1
            assert constraint["labelSelector"] == selector
    hard = render("gateway.topologySpread.whenUnsatisfiable=DoNotSchedule")
    assert {c["whenUnsatisfiable"] for c in hard.pod("gateway")["topologySpreadConstraints"]} == {
        "DoNotSchedule"
    }
    assert "topologySpreadConstraints" not in render("topologySpread.topologyKeys=null").pod(
        "gateway"
    )


@pytest.mark.parametrize(
    ("mode", "field"),
    [
        ("soft", "preferredDuringSchedulingIgnoredDuringExecution"),
        ("hard", "requiredDuringSchedulingIgnoredDuringExecution"),
    ],
)
def test_pod_anti_affinity_keeps_replicas_off_one_node(mode: str, field: str) -> None:
    out = render(f"podAntiAffinity={mode}", "affinity.nodeAffinity.x=kept")
    affinity = out.pod("scoring")["affinity"]
    assert affinity["nodeAffinity"] == {"x": "kept"}  # added to, not replacing, `affinity`
    (term,) = affinity["podAntiAffinity"][field]
    term = term.get("podAffinityTerm", term)
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"] == out.deployment("scoring")["spec"]["selector"]
    assert "affinity" not in render().pod("scoring")


# --- NetworkPolicies


def grpc_callers(out: Rendered, component: str) -> set[str] | None:
    """The components a component's gRPC port admits; None: anyone."""
    policy = out.of("NetworkPolicy")[f"mem-engram-{component}"]
    rules = [r for r in policy["spec"]["ingress"] if r["ports"][0]["port"] == "grpc"]
    if not rules:
        return set()
    (rule,) = rules
    if "from" not in rule:
        return None
    return {component_of(peer["podSelector"]) for peer in rule["from"]}


def test_each_component_takes_grpc_only_from_its_callers() -> None:
    out = render()
    assert sorted(out.of("NetworkPolicy")) == sorted(f"mem-engram-{c}" for c in COMPONENTS)
    for component in COMPONENTS:
        policy = out.of("NetworkPolicy")[f"mem-engram-{component}"]
        assert component_of(policy["spec"]["podSelector"]) == component
        assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    stores = {"gateway", "ingest", "consolidate"}
    expected = {
        "gateway": None,
        "vector": stores,
        "lexical": stores,
        "graph": stores,
        "scoring": {"gateway"},
        "ingest": set(),
        "consolidate": set(),
    }
    assert {c: grpc_callers(out, c) for c in COMPONENTS} == expected
    # Only the metrics port besides; open to anyone unless metricsFrom says who.
    for component in COMPONENTS:
        ingress = out.of("NetworkPolicy")[f"mem-engram-{component}"]["spec"]["ingress"]
        assert {r["ports"][0]["port"] for r in ingress} <= {"grpc", "metrics"}
        (metrics,) = [r for r in ingress if r["ports"][0]["port"] == "metrics"]
        assert "from" not in metrics


def test_gateway_and_metrics_peers_come_from_values() -> None:
    out = render(
        "networkPolicy.gatewayFrom[0].namespaceSelector.matchLabels.team=agents",
        "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.team=monitoring",
    )
    ingress = out.of("NetworkPolicy")["mem-engram-gateway"]["spec"]["ingress"]
    by_port = {r["ports"][0]["port"]: r["from"] for r in ingress}
    agents, hook = by_port["grpc"]
    assert agents == {"namespaceSelector": {"matchLabels": {"team": "agents"}}}
    (test_pod,) = out.of("Pod").values()  # `helm test` still reaches the gateway
    assert hook["podSelector"]["matchLabels"].items() <= test_pod["metadata"]["labels"].items()
    assert by_port["metrics"] == [{"namespaceSelector": {"matchLabels": {"team": "monitoring"}}}]
    assert "NetworkPolicy" not in render("networkPolicy.enabled=false").kinds()


def egress_ports(out: Rendered, component: str) -> tuple[set[str], set[int]]:
    """(the components a component may call, the other TCP ports it may open)."""
    egress = out.of("NetworkPolicy")[f"mem-engram-{component}"]["spec"]["egress"]
    callees: set[str] = set()
    ports: set[int] = set()
    for rule in egress:
        peers = [p for p in rule.get("to", []) if "podSelector" in p]
        if peers:
            callees |= {component_of(p["podSelector"]) for p in peers}
        else:
            ports |= {p["port"] for p in rule["ports"] if p["protocol"] == "TCP"}
    return callees, ports


def test_egress_reaches_dns_the_callees_and_the_backing_services_only() -> None:
    out = render()
    stores = {"vector", "lexical", "graph"}
    expected = {
        "gateway": ({*stores, "scoring"}, {53, 4222, 6379}),
        "vector": (set(), {53, 6379, 6333, 6334}),
        "lexical": (set(), {53, 9200}),
        "graph": (set(), {53, 7687}),
        "scoring": (set(), {53}),
        "ingest": (stores, {53, 4222}),
        "consolidate": (stores, {53, 4222, 6379}),
    }
    assert {c: egress_ports(out, c) for c in COMPONENTS} == expected
    moved = render("scoring.port=50052").of("NetworkPolicy")["mem-engram-gateway"]
    (to_servers,) = [r for r in moved["spec"]["egress"] if "to" in r]
    assert to_servers["ports"] == [
        {"port": 50051, "protocol": "TCP"},
        {"port": 50052, "protocol": "TCP"},
    ]
    embedded = render("graph.backend=ladybug", "graph.replicas=1")
    assert egress_ports(embedded, "graph") == (set(), {53})
    traced = render("tracing.exporter=otlp", "tracing.otlpEndpoint=http://c:4317")
    assert 4317 in egress_ports(traced, "scoring")[1]
    loose = render("networkPolicy.egress.enabled=false")
    assert "egress" not in loose.of("NetworkPolicy")["mem-engram-gateway"]["spec"]


# --- Rolling on a changed Secret or configuration


def pod_annotations(out: Rendered, component: str) -> dict[str, str]:
    return out.deployment(component)["spec"]["template"]["metadata"]["annotations"]  # type: ignore[no-any-return]


def test_a_changed_token_list_rolls_the_gateway_alone() -> None:
    before = render()
    after = render("auth.tokens[0].sha256=" + "b" * 64)
    assert (
        pod_annotations(before, "gateway")["checksum/auth"]
        != (pod_annotations(after, "gateway")["checksum/auth"])
    )
    for component in COMPONENTS:
        if component != "gateway":
            assert pod_annotations(before, component) == pod_annotations(after, component)
            assert "checksum/auth" not in pod_annotations(before, component)


def test_a_changed_setting_or_secret_name_rolls_the_pods_that_read_it() -> None:
    before = render()
    moved = render("nats.url=nats://elsewhere:4222", "neo4j.passwordSecret.name=neo4j-2")
    sums = {c: pod_annotations(before, c)["checksum/config"] for c in COMPONENTS}
    changed = {c for c in COMPONENTS if pod_annotations(moved, c)["checksum/config"] != sums[c]}
    assert changed == {"gateway", "ingest", "consolidate", "graph"}


# --- Metrics, ServiceMonitor, PrometheusRule, KEDA


def test_every_service_serves_metrics_on_its_own_port() -> None:
    out = render("ingest.metrics.port=9500")
    for component in COMPONENTS:
        port = 9500 if component == "ingest" else 9464
        ports = {p["name"]: p["containerPort"] for p in out.container(component)["ports"]}
        assert ports["metrics"] == port
        assert out.values(component)[f"ENGRAM_{component.upper()}_METRICS__PORT"] == str(port)
    off = render("metrics.enabled=false")
    assert [p["name"] for p in off.container("gateway")["ports"]] == ["grpc"]
    assert "ENGRAM_GATEWAY_METRICS__PORT" not in off.values("gateway")


def test_monitoring_resources_are_rendered_only_when_enabled() -> None:
    assert not set(CUSTOM_KINDS) & render().kinds()
    out = render(
        "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.labels.release=prom",
        "metrics.prometheusRule.enabled=true",
    )
    (monitor,) = out.of("ServiceMonitor").values()
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    wanted = monitor["spec"]["selector"]["matchLabels"]
    scraped = [
        s for s in out.of("Service").values() if wanted.items() <= s["metadata"]["labels"].items()
    ]
    # One Service per component, each on the pods' metrics port.
    assert sorted(s["spec"]["selector"]["app.kubernetes.io/component"] for s in scraped) == sorted(
        COMPONENTS
    )
    for service in scraped:
        (port,) = service["spec"]["ports"]
        assert (port["name"], port["targetPort"]) == ("metrics", "metrics")
    (rule,) = out.of("PrometheusRule").values()
    exprs = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]]
    # Every ingest replica reports the one durable's backlog: max of it, never a sum, and
    # only ingest's durable, not the consolidate consumers'; what the replicas read ahead
    # (ack pending) is backlog too.
    (backlog,) = [e for e in exprs if "consumer_pending" in e]
    assert backlog.startswith('max(engram_jetstream_consumer_pending{durable="ingest-apply"')
    assert 'engram_jetstream_consumer_ack_pending{durable="ingest-apply"' in backlog
    assert (
        "ServiceMonitor"
        not in render("metrics.enabled=false", "metrics.serviceMonitor.enabled=true").kinds()
    )


def test_worker_processes_each_get_a_metrics_port_scraped_and_let_through() -> None:
    out = render("gateway.workers=3", "metrics.serviceMonitor.enabled=true")
    assert out.values("gateway")["ENGRAM_GATEWAY_WORKERS"] == "3"
    assert out.values("scoring")["ENGRAM_SCORING_WORKERS"] == "1"
    wanted = [("metrics", 9464), ("metrics-1", 9465), ("metrics-2", 9466)]
    ports = [(p["name"], p["containerPort"]) for p in out.container("gateway")["ports"]]
    assert ports == [("grpc", 50051), *wanted]
    service = out.of("Service")["mem-engram-gateway-metrics"]
    assert [(p["name"], p["port"]) for p in service["spec"]["ports"]] == wanted
    (monitor,) = out.of("ServiceMonitor").values()
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == [n for n, _ in wanted]
    ingress = out.of("NetworkPolicy")["mem-engram-gateway"]["spec"]["ingress"]
    assert [p["port"] for p in ingress[-1]["ports"]] == [n for n, _ in wanted]
    # One process each, the other components keep the one port.
    assert [p["name"] for p in out.container("scoring")["ports"]] == ["grpc", "metrics"]


def test_keda_scales_ingest_on_the_consumer_backlog() -> None:
    out = render("ingest.keda.enabled=true", "ingest.keda.maxReplicas=8")
    (scaled,) = out.of("ScaledObject").values()
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    assert scaled["spec"]["scaleTargetRef"]["name"] == "mem-engram-ingest"
    assert (scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"]) == (1, 8)
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    assert trigger["metadata"]["query"] == (
        'max(engram_jetstream_consumer_pending{durable="ingest-apply"}'
        ' + engram_jetstream_consumer_ack_pending{durable="ingest-apply"})'
    )
    assert trigger["metadata"]["threshold"] == "1000"
    assert "replicas" not in out.deployment("ingest")["spec"]  # KEDA's HPA owns it
    assert out.deployment("gateway")["spec"]["replicas"] == 2
    error = render_error("ingest.keda.enabled=true", "ingest.autoscaling.enabled=true")
    assert "ingest.keda: KEDA and ingest.autoscaling would both scale ingest" in error


# --- TLS


def tls_files(out: Rendered, component: str) -> dict[str, str]:
    """Where the TLS Secret's keys appear in the pod: {key: path}."""
    pod = out.pod(component)
    (volume,) = [v for v in pod["volumes"] if v["name"] == "tls"]
    assert volume["secret"]["secretName"] == "engram-tls"
    (mount,) = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "tls"]
    assert mount["readOnly"] is True
    return {i["key"]: f"{mount['mountPath']}/{i['path']}" for i in volume["secret"]["items"]}


@pytest.mark.parametrize("component", COMPONENTS)
def test_tls_mounts_the_secret_and_names_its_files(component: str) -> None:
    out = render(*TLS, "tls.clientAuth=require", "tls.serverName=engram.internal")
    files = tls_files(out, component)
    values = out.values(component)
    p = f"ENGRAM_{component.upper()}_"
    assert values[f"{p}TLS__CERT_FILE"] == files["tls.crt"]
    assert values[f"{p}TLS__KEY_FILE"] == files["tls.key"]
    assert values[f"{p}TLS__CA_FILE"] == files["ca.crt"]
    assert values[f"{p}TLS__CLIENT_AUTH"] == "require"
    client = {k.removeprefix(f"{p}CLIENT_TLS__"): v for k, v in values.items() if "CLIENT_TLS" in k}
    if component in ("gateway", "ingest", "consolidate"):
        assert client == {
            "CA_FILE": files["ca.crt"],
            "CERT_FILE": files["tls.crt"],
            "KEY_FILE": files["tls.key"],
            "SERVER_NAME": "engram.internal",
        }
    else:
        assert client == {}


@pytest.mark.parametrize("component", COMPONENTS)
def test_with_tls_the_probes_run_the_health_command_with_the_ca(component: str) -> None:
    container = render(*TLS).container(component)
    ca = tls_files(render(*TLS), component)["ca.crt"]
    port = container["ports"][0]["containerPort"]
    for probe, service in (
        ("startupProbe", SERVICE_NAMES[component]),
        ("readinessProbe", SERVICE_NAMES[component]),
        ("livenessProbe", None),
    ):
        assert "grpc" not in container[probe]
        command = container[probe]["exec"]["command"]
        assert command[:3] == ["python", "-m", "engram_platform.health"]
        assert command[command.index("--ca") + 1] == ca
        assert command[command.index("--server-name") + 1] == f"mem-engram-{component}.agents.svc"
        assert "--cert" not in command  # no client certificate without clientAuth require
        tail = [f"127.0.0.1:{port}"] + ([service] if service else [])
        assert command[-len(tail) :] == tail


def test_mtls_probes_and_helm_test_present_the_client_certificate() -> None:
    out = render(*TLS, "tls.clientAuth=require")
    command = out.container("graph")["readinessProbe"]["exec"]["command"]
    assert command[command.index("--cert") + 1] == "/etc/engram/tls/tls.crt"
    assert command[command.index("--key") + 1] == "/etc/engram/tls/tls.key"
    (hook,) = out.of("Pod").values()
    (container,) = hook["spec"]["containers"]
    assert "--ca=/etc/engram/tls/ca.crt" in container["args"]
    assert "--cert=/etc/engram/tls/tls.crt" in container["args"]
    assert hook["spec"]["volumes"] == [{"name": "tls", "secret": {"secretName": "engram-tls"}}]


def test_tls_takes_a_components_own_secret_and_needs_one() -> None:
    out = render(*TLS, "gateway.tls.secretName=gateway-public-tls")
    pod = out.pod("gateway")
    (volume,) = [v for v in pod["volumes"] if v["name"] == "tls"]
    assert volume["secret"]["secretName"] == "gateway-public-tls"
    assert tls_files(out, "vector")["tls.crt"] == "/etc/engram/tls/tls.crt"
    assert "tls.secretName is required" in render_error("tls.enabled=true")
    plain = render()
    assert not any("TLS__" in k for c in COMPONENTS for k in plain.values(c))


# --- TLS, run: a server from the image's runtime with the chart's mTLS environment answers
# the probes the chart gives its pod, and nothing without a client certificate.


def pod_locally(out: Rendered, component: str, tls_dir: Path) -> tuple[dict[str, str], int]:
    """The pod's literal environment with the mount and ports made local, and its port."""
    prefix = f"ENGRAM_{component.upper()}_"
    grpc_port, metrics_port = free_ports(2)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGRAM_")}
    for key, value in out.values(component).items():
        env[key] = value.replace("/etc/engram/tls", str(tls_dir))
    env |= {f"{prefix}HOST": "127.0.0.1", f"{prefix}PORT": str(grpc_port)}
    env[f"{prefix}METRICS__PORT"] = str(metrics_port)
    env["ENGRAM_HOME"] = str(Path(image_python()).parents[2])  # what the image sets
    return env, grpc_port


def probe_locally(probe: dict[str, Any], python: str, tls_dir: Path) -> list[str]:
    command = [c.replace("/etc/engram/tls", str(tls_dir)) for c in probe["exec"]["command"]]
    assert command[0] == "python"
    return [python, *command[1:]]


@pytest.fixture
def mtls_scoring(tmp_path: Path) -> Iterator[tuple[Rendered, Path, int]]:
    out = render(*TLS, "tls.clientAuth=require")
    ca = trustme.CA()
    leaf = ca.issue_cert("mem-engram-scoring.agents.svc")
    ca.cert_pem.write_to_path(str(tmp_path / "ca.crt"))
    leaf.cert_chain_pems[0].write_to_path(str(tmp_path / "tls.crt"))
    leaf.private_key_pem.write_to_path(str(tmp_path / "tls.key"))
    env, port = pod_locally(out, "scoring", tmp_path)
    log = (tmp_path / "scoring.log").open("wb")
    server = subprocess.Popen(
        [image_python(), "-m", "engram_scoring"], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        yield out, tmp_path, port
    finally:
        server.terminate()
        server.wait(15)
        log.close()


def test_the_tls_probes_pass_against_the_charts_mtls_server(
    mtls_scoring: tuple[Rendered, Path, int],
) -> None:
    out, tls_dir, port = mtls_scoring
    container = out.container("scoring")
    python = image_python()

    def run(command: list[str]) -> subprocess.CompletedProcess[str]:
        command = [c.replace("127.0.0.1:50051", f"127.0.0.1:{port}") for c in command]
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)

    startup = probe_locally(container["startupProbe"], python, tls_dir)
    for _ in range(120):  # the startup probe's job: until the server is up
        done = run(startup)
        if done.returncode == 0:
            break
        time.sleep(0.5)
    assert done.returncode == 0, done.stdout + done.stderr + (tls_dir / "scoring.log").read_text()
    for probe in ("readinessProbe", "livenessProbe"):
        done = run(probe_locally(container[probe], python, tls_dir))
        assert done.returncode == 0, done.stdout + done.stderr
    # Without the client certificate, or in plaintext, the server refuses.
    no_cert = [c for c in startup if not c.startswith(str(tls_dir / "tls."))]
    no_cert = [c for c in no_cert if c not in ("--cert", "--key")]
    plaintext = [python, "-m", "engram_platform.health", f"127.0.0.1:{port}"]
    for refused in (no_cert, plaintext):
        done = run(refused)
        assert done.returncode == 1
        assert done.stdout.strip().endswith("UNAVAILABLE")


# --- The Kubernetes schemas


def assert_valid(out: Rendered) -> None:
    done = kubeconform(out.text)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Invalid: 0, Errors: 0" in done.stdout


def test_the_default_rendering_is_valid_kubernetes() -> None:
    assert_valid(render())


def test_everything_on_is_valid_kubernetes() -> None:
    assert_valid(render(*EVERYTHING))


@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_renders_valid_kubernetes(example: Path) -> None:
    assert_valid(render(base=(), files=[example]))


def test_kubeconform_refuses_a_field_kubernetes_does_not_know() -> None:
    """The check is real: -strict schemas of the named version, not a pass-through."""
    out = render()
    broken = out.text.replace("automountServiceAccountToken: false", "automountToken: false", 1)
    assert broken != out.text
    done = kubeconform(broken)
    assert done.returncode != 0
    assert "automountToken" in done.stdout


def test_the_production_example_uses_every_backing_service_setting() -> None:
    out = render(base=(), files=[EXAMPLES / "production-values.yaml"])
    assert out.values("ingest")["ENGRAM_INGEST_NATS__STREAM_REPLICAS"] == "3"
    assert out.values("ingest")["ENGRAM_INGEST_NATS__URL"] == "nats://nats.nats.svc:4222"
    assert out.values("lexical")["ENGRAM_LEXICAL_OPENSEARCH__CA_FILE"].endswith("/ca.crt")
    for component, variable in (
        ("gateway", "CACHE__REDIS__PASSWORD_FILE"),
        ("vector", "QDRANT__API_KEY_FILE"),
        ("lexical", "OPENSEARCH__PASSWORD_FILE"),
        ("graph", "NEO4J__PASSWORD_FILE"),
        ("gateway", "TLS__CERT_FILE"),
    ):
        assert f"ENGRAM_{component.upper()}_{variable}" in out.values(component)
    assert set(CUSTOM_KINDS) <= out.kinds()
    assert "Secret" not in out.kinds()  # every secret is an existing one
