#!/usr/bin/env bash
# Move the Dockerfile's pins to TAG's current image (`make image-pin`): the base's digest
# (the multi-arch index, as crane, skopeo or docker buildx imagetools report it: each asks
# the registry, so this needs one reachable) and, where docker can run that image, the
# build stage's apt packages at the versions its Debian offers now. uv stays as it is: it
# moves with uv.lock. Review the diff, build, commit.
set -euo pipefail
tag=${1:-python:3.11-slim-bookworm}
dockerfile=${DOCKERFILE:-$(cd "$(dirname "$0")" && pwd)/Dockerfile}

digest_of() {
  local ref=$1
  if command -v crane >/dev/null 2>&1; then
    crane digest "$ref"
  elif command -v skopeo >/dev/null 2>&1; then
    # The digest of an index is the SHA-256 of its bytes as the registry serves them.
    [[ $ref == */* ]] || ref=docker.io/library/$ref
    echo "sha256:$(skopeo inspect --raw "docker://$ref" | sha256sum | cut -d' ' -f1)"
  elif command -v docker >/dev/null 2>&1; then
    docker buildx imagetools inspect "$ref" --format '{{.Manifest.Digest}}'
  else
    echo "image-pin: needs crane, skopeo or docker (buildx) with access to the registry" >&2
    return 1
  fi
}

set_arg() {  # set_arg NAME VALUE: rewrite `ARG NAME=...` in the Dockerfile
  sed -i "s|^ARG $1=.*|ARG $1=$2|" "$dockerfile"
  grep -q "^ARG $1=$2\$" "$dockerfile" || { echo "image-pin: no ARG $1 in $dockerfile" >&2; return 1; }
}

digest=$(digest_of "$tag")
[[ $digest =~ ^sha256:[0-9a-f]{64}$ ]] || { echo "image-pin: not a digest: $digest" >&2; exit 1; }
set_arg PYTHON_IMAGE "$tag@$digest"
echo "PYTHON_IMAGE=$tag@$digest"

if command -v docker >/dev/null 2>&1; then
  candidates=$(docker run --rm "$tag@$digest" sh -c \
    'apt-get update -qq >/dev/null && apt-cache policy openjdk-17-jre-headless maven')
  jre=$(awk '/^openjdk-17-jre-headless:/{p=1} p&&/Candidate:/{print $2; exit}' <<<"$candidates")
  maven=$(awk '/^maven:/{p=1} p&&/Candidate:/{print $2; exit}' <<<"$candidates")
  set_arg JRE_VERSION "$jre" && echo "JRE_VERSION=$jre"
  set_arg MAVEN_VERSION "$maven" && echo "MAVEN_VERSION=$maven"
else
  echo "image-pin: no docker here to ask the image's Debian; JRE_VERSION and MAVEN_VERSION left as they are"
fi
