# Engram — every target runs inside the uv workspace (.venv), installed on first use.
SHELL := /bin/bash
UV ?= $(shell command -v uv 2>/dev/null || echo $(HOME)/.local/bin/uv)
PY := $(UV) run --frozen --no-sync python
ENGRAM_HOME ?= $(CURDIR)/.engram
# The default embedding model, bge-small int8, and its fp32 original (Maven Central, so
# mvn); all-MiniLM-L6-v2 and the reranker (PyPI). Tests use all four.
EMBED_MODELS ?= bge-small-en-v1.5-q bge-small-en-v1.5 all-MiniLM-L6-v2 ms-marco-MiniLM-L-12-v2
export ENGRAM_HOME
PACKAGES := engram_core engram_platform engram_embed engram_clients engram_client engram_mcp engram_testing \
  $(addprefix engram_,gateway vector lexical graph scoring ingest consolidate)

.DEFAULT_GOAL := help
.PHONY: help uv sync proto proto-check proto-lock docs lint typecheck test test-integration test-chart test-faults helm kubeconform image-root image-pin sbom run run-servers up-servers down-servers models default-model bench bench-quality clean

help: ## list targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-18s %s\n", $$1, $$2}'

uv: ## install uv when it is missing
	@command -v $(UV) >/dev/null 2>&1 || python3 -m pip install --user --quiet uv

sync: uv ## install the workspace (.venv) from uv.lock
	@$(UV) sync --frozen --all-packages --quiet

proto: sync ## regenerate libs/api from proto/
	@rm -rf libs/api/src/engram && mkdir -p libs/api/src
	@$(PY) -m grpc_tools.protoc -Iproto --python_out=libs/api/src --grpc_python_out=libs/api/src \
	  --mypy_out=libs/api/src --mypy_grpc_out=libs/api/src $$(find proto -name '*.proto' | sort)
	@find libs/api/src/engram -type d -exec touch {}/__init__.py \;
	@touch libs/api/src/engram/py.typed
	@echo "regenerated libs/api from proto/"

proto-check: ## fail when libs/api drifts from proto/, or the API changed and proto/api-lock.json does not say so
	@$(MAKE) --no-print-directory proto >/dev/null
	@git diff --exit-code --stat -- libs/api || { echo "libs/api is stale: run 'make proto' and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- libs/api)" || { git status --porcelain -- libs/api; echo "libs/api has untracked generated files: commit them"; exit 1; }
	@$(PY) -m engram_testing.proto_surface

proto-lock: sync ## record a deliberate API change (breaking or not) in proto/api-lock.json
	@$(PY) -m engram_testing.proto_surface --write

docs: sync ## write each service README's settings reference from its settings models (a test fails when one is stale)
	@$(PY) tools/gen_settings_docs.py

lint: sync ## ruff check + format check + import rules (DESIGN §7)
	@$(UV) run --frozen --no-sync ruff check .
	@$(UV) run --frozen --no-sync ruff format --check .
	@$(UV) run --frozen --no-sync lint-imports

typecheck: sync ## mypy --strict on libs, services and bench
	@$(UV) run --frozen --no-sync mypy $(addprefix -p ,$(PACKAGES)) -p bench

models: sync ## build the embedding and reranker models in EMBED_MODELS (ONNX) once into $(ENGRAM_HOME)/models
	@$(PY) -m engram_embed.build $(addprefix --model ,$(EMBED_MODELS))

default-model: sync ## build only the default embedding model (mvn fetches it from Maven Central)
	@$(PY) -m engram_embed.build

test: sync models ## unit, contract and end-to-end tests on the embedded stack
	@$(UV) run --frozen --no-sync pytest -m "not integration and not chart and not faults" -q

test-integration: sync models ## contract + e2e suites on real OpenSearch, Neo4j, Redis, NATS (started when absent)
	@$(UV) run --frozen --no-sync pytest -m integration -q tests/integration

test-faults: sync ## fault suite: kills, hangs, outages, poison, fuzz, tenants on the embedded stack (figures + summary)
	@$(UV) run --frozen --no-sync pytest -m faults -q tests/faults

# helm itself, built from the Go module proxy (needs Go) into $(ENGRAM_HOME)/bin, once.
HELM_VERSION ?= v4.3.2
HELM := $(ENGRAM_HOME)/bin/helm-$(HELM_VERSION)/helm

$(HELM):
	@echo "building helm $(HELM_VERSION) into $(@D) (go install) ..."
	@GOBIN=$(@D) GOFLAGS=-mod=mod go install helm.sh/helm/v4/cmd/helm@$(HELM_VERSION)

helm: $(HELM) ## build the helm CLI the chart tests use (go install, about 3 minutes the first time)

# kubeconform checks the rendered manifests against the Kubernetes JSON schemas, which it
# would download from GitHub; deploy/helm/kube_schemas.py takes them from the PyPI package
# kubernetes-validate instead, for the version the chart names (Chart.yaml kubeVersion).
KUBECONFORM_VERSION ?= v0.8.0
KUBECONFORM := $(ENGRAM_HOME)/bin/kubeconform-$(KUBECONFORM_VERSION)/kubeconform
KUBE_SCHEMAS_PACKAGE ?= kubernetes-validate==1.37.0
KUBE_VERSION := $(shell sed -n 's/^kubeVersion: *">=\([0-9.]*\)-0"/\1/p' deploy/helm/engram/Chart.yaml)
KUBE_SCHEMAS := $(ENGRAM_HOME)/kube-schemas/v$(KUBE_VERSION)-strict

$(KUBECONFORM):
	@echo "building kubeconform $(KUBECONFORM_VERSION) into $(@D) (go install) ..."
	@GOBIN=$(@D) GOFLAGS=-mod=mod go install github.com/yannh/kubeconform/cmd/kubeconform@$(KUBECONFORM_VERSION)

$(KUBE_SCHEMAS)/_definitions.json:
	@echo "fetching the Kubernetes $(KUBE_VERSION) JSON schemas ($(KUBE_SCHEMAS_PACKAGE), PyPI) ..."
	@rm -rf $(@D) && python3 deploy/helm/kube_schemas.py "$(KUBE_SCHEMAS_PACKAGE)" $(KUBE_VERSION) $(@D)

kubeconform: $(KUBECONFORM) $(KUBE_SCHEMAS)/_definitions.json ## build kubeconform and fetch the Kubernetes JSON schemas the chart is checked against

image-root: uv ## assemble what the image holds (deploy/image/assemble.sh) into $(ENGRAM_HOME)/image
	@PATH="$(dir $(UV)):$$PATH" deploy/image/assemble.sh $(ENGRAM_HOME)/image

# The image's pins (deploy/image/Dockerfile) moved to the tag's current base image; needs
# crane, skopeo or docker with a reachable registry.
image-pin: ## pin the image's base by digest (and its apt packages) to the tag's current image
	@deploy/image/pin.sh

SBOM ?= $(ENGRAM_HOME)/sbom/engram.cdx.json
sbom: sync ## CycloneDX JSON SBOM of the image's Python packages (from uv.lock) into $(SBOM)
	@PATH="$(dir $(UV)):$$PATH" deploy/image/sbom.sh $(SBOM)

test-chart: sync helm kubeconform image-root ## render deploy/helm/engram, check it against the services and the Kubernetes schemas, run its configuration
	@ENGRAM_HELM=$(HELM) ENGRAM_IMAGE_ROOT=$(ENGRAM_HOME)/image \
	  ENGRAM_KUBECONFORM=$(KUBECONFORM) ENGRAM_KUBE_SCHEMAS=$(KUBE_SCHEMAS) \
	  $(UV) run --frozen --no-sync pytest -m chart -q tests/deploy

run: sync default-model ## start NATS and the seven services on embedded backends
	@$(PY) -m engram_testing.devstack

up-servers: sync ## start OpenSearch, Neo4j, Redis and NATS here (Maven/Debian/PyPI), detached
	@$(PY) -m engram_testing.localservers up

down-servers: sync ## stop the servers that up-servers started
	@$(PY) -m engram_testing.localservers down

run-servers: sync default-model ## start the servers, then the seven services on them
	@$(PY) -m engram_testing.devstack --servers

N ?= 10000
bench: sync default-model ## speed and scale benchmark (BENCHMARKS.md §2); N=100000 for the 100k figures
	@$(PY) -m bench.perf --n $(N)

bench-quality: sync models ## retrieval quality on LoCoMo: bm25 / vector / hybrid / hybrid_graph (BENCHMARKS.md §1)
	@$(PY) -m bench.quality

clean: ## remove local data under .engram (keeps the model)
	@rm -rf $(ENGRAM_HOME)/data
