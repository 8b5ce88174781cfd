#!/usr/bin/env bash
# Assemble Engram's runtime under ROOT: ROOT/venv (every service, no dev or test tools) and
# ROOT/models (the default embedding model), so that ENGRAM_HOME=ROOT and
# ROOT/venv/bin/python -m engram_<service> runs any service. The image's build stage runs
# it; so can anyone with uv, Java 17 and Maven (the model comes from Maven Central).
set -euo pipefail
root=${1:?usage: deploy/image/assemble.sh ROOT}
src=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$root"
root=$(cd "$root" && pwd)
cd "$src"

# The model, built once with the build tools (onnx) in an environment thrown away after.
UV_PROJECT_ENVIRONMENT="$root/build-venv" uv sync --frozen --package engram-embed --group build --no-dev --quiet
ENGRAM_HOME="$root" "$root/build-venv/bin/python" -m engram_embed.build
rm -rf "$root/build-venv"

# The services: installed (not linked to this checkout) and compiled, since the image runs
# on a read-only root; the seven service packages and what they depend on, so neither the
# dev dependency group nor the test library (engram-testing, pytest) goes in. The
# workspace's own packages are installed afresh each time: their version does not change
# with their code.
. deploy/image/packages.sh
UV_PROJECT_ENVIRONMENT="$root/venv" uv sync --frozen --no-dev --no-editable --compile-bytecode \
  --quiet "${service_args[@]}" "${fresh_args[@]}"
echo "assembled in $root: $(du -sh "$root/venv" | cut -f1) venv, $(du -sh "$root/models" | cut -f1) models"
