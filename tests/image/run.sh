#!/bin/sh
# The image stage, on its own: install podman/buildah when absent, build the device-plugin image
# (printing its size and installed packages), then run tests/image against it.
#
#   tests/image/run.sh [pytest args...]
#
# Environment:
#   HYGON_DCU_BASE_IMAGE   base image; default: the registry's debian:bookworm-slim when it can
#                          be pulled, else a locally built one (plugin_image/tools/base_image.sh)
#   HYGON_DCU_TEST_IMAGE   tag to build and test (default localhost/hygon-dcu-plugin:test)
set -eu

repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
started="$(date +%s)"

if [ "$(id -u)" -ne 0 ]; then
    echo "the image stage needs root (podman as root, mount namespaces for minirun)" >&2
    exit 1
fi
tests/image/install_tools.sh

: "${CONTAINERS_CONF:=$repo/plugin_image/containers.conf}"
: "${HYGON_DCU_TEST_IMAGE:=localhost/hygon-dcu-plugin:test}"
export CONTAINERS_CONF HYGON_DCU_TEST_IMAGE

if [ -z "${HYGON_DCU_BASE_IMAGE:-}" ]; then
    registry_base=docker.io/library/debian:bookworm-slim
    if podman image exists "$registry_base" ||
        timeout 60 podman pull --quiet "$registry_base" >/dev/null 2>&1; then
        HYGON_DCU_BASE_IMAGE="$registry_base"
    else
        echo "no registry reachable: building the base image locally" >&2
        HYGON_DCU_BASE_IMAGE=local
    fi
fi
export HYGON_DCU_BASE_IMAGE

make -s -C tests/simulator
plugin_image/tools/build_image.sh --tag "$HYGON_DCU_TEST_IMAGE" --base "$HYGON_DCU_BASE_IMAGE"

status=0
HYGON_DCU_TEST_IMAGE_BUILT="$HYGON_DCU_TEST_IMAGE" .venv/bin/pytest tests/image -p no:cacheprovider "$@" || status=$?
echo "image stage: $(($(date +%s) - started)) s (exit $status)"
exit "$status"
