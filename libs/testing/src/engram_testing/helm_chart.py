"""The Helm chart (deploy/helm/engram) rendered by the real helm binary, and its manifests
checked by kubeconform: what the chart tests (tests/deploy, `make test-chart`) share."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]

REPO = Path(__file__).resolve().parents[4]
CHART = REPO / "deploy" / "helm" / "engram"
EXAMPLES = REPO / "deploy" / "examples"
TOKEN_SHA = "a" * 64
# The least a release needs: who may call the gateway.
BASE = (
    "auth.tokens[0].sha256=" + TOKEN_SHA,
    "auth.tokens[0].tenant=acme",
    "auth.tokens[0].scopes[0]=read",
)
# Kinds of custom resources whose schemas no registry ships: kubeconform skips them, and
# the tests check their fields instead.
CUSTOM_KINDS = ("ServiceMonitor", "PrometheusRule", "ScaledObject")


def helm() -> str:
    """The helm binary `make test-chart` builds and names in ENGRAM_HELM, or one on PATH;
    fails loudly when there is none."""
    found = os.environ.get("ENGRAM_HELM") or shutil.which("helm")
    if found is None:
        raise RuntimeError("no helm binary: run `make test-chart` (builds one with Go)")
    return found


@dataclass(frozen=True)
class Rendered:
    docs: list[dict[str, Any]]
    text: str

    def of(self, kind: str) -> dict[str, dict[str, Any]]:
        return {d["metadata"]["name"]: d for d in self.docs if d["kind"] == kind}

    def kinds(self) -> set[str]:
        return {d["kind"] for d in self.docs}

    def deployment(self, component: str) -> dict[str, Any]:
        return self.of("Deployment")[f"mem-engram-{component}"]

    def pod(self, component: str) -> dict[str, Any]:
        return self.deployment(component)["spec"]["template"]["spec"]  # type: ignore[no-any-return]

    def container(self, component: str) -> dict[str, Any]:
        (container,) = self.pod(component)["containers"]
        return container  # type: ignore[no-any-return]

    def env(self, component: str) -> dict[str, dict[str, Any]]:
        return {e["name"]: e for e in self.container(component)["env"]}

    def values(self, component: str) -> dict[str, str]:
        """The literal env values (not those from the downward API)."""
        return {k: e["value"] for k, e in self.env(component).items() if "value" in e}


def run_helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm(), *args], capture_output=True, text=True, timeout=120, check=False)


def set_args(items: Sequence[str]) -> list[str]:
    return [arg for item in items for arg in ("--set", item)]


def template(
    sets: Sequence[str], base: Sequence[str], files: Sequence[Path] = ()
) -> subprocess.CompletedProcess[str]:
    given = [arg for f in files for arg in ("--values", str(f))]
    return run_helm(
        "template", "mem", str(CHART), "--namespace", "agents", *given, *set_args([*base, *sets])
    )


def render(*sets: str, base: Sequence[str] = BASE, files: Sequence[Path] = ()) -> Rendered:
    done = template(sets, base, files)
    if done.returncode != 0:
        raise AssertionError(f"helm template failed:\n{done.stderr}")
    return Rendered([d for d in yaml.safe_load_all(done.stdout) if d], done.stdout)


def render_error(*sets: str, base: Sequence[str] = BASE) -> str:
    done = template(sets, base)
    assert done.returncode != 0, f"helm template accepted {sets}"
    return done.stderr


def image_python() -> str:
    """The interpreter of the image's runtime `make test-chart` assembles (ENGRAM_IMAGE_ROOT):
    what the pods run."""
    root = os.environ.get("ENGRAM_IMAGE_ROOT")
    python = Path(root or "/nonexistent") / "venv" / "bin" / "python"
    if not python.exists():
        raise RuntimeError("no assembled image root: run `make test-chart` (ENGRAM_IMAGE_ROOT)")
    return str(python)


def kubeconform(manifests: str) -> subprocess.CompletedProcess[str]:
    """kubeconform -strict over ``manifests`` against the schemas `make kubeconform`
    fetched (ENGRAM_KUBE_SCHEMAS: one Kubernetes version's strict schemas)."""
    binary = os.environ.get("ENGRAM_KUBECONFORM") or shutil.which("kubeconform")
    schemas = os.environ.get("ENGRAM_KUBE_SCHEMAS")
    if binary is None or not schemas or not (Path(schemas) / "_definitions.json").exists():
        raise RuntimeError("no kubeconform or schemas: run `make test-chart`")
    location = f"{schemas}/{{{{ .ResourceKind }}}}{{{{ .KindSuffix }}}}.json"
    command = [binary, "-strict", "-summary", "-schema-location", location]
    command += ["-skip", ",".join(CUSTOM_KINDS), "-"]
    return subprocess.run(
        command, input=manifests, capture_output=True, text=True, timeout=120, check=False
    )
