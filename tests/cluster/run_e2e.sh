#!/usr/bin/env bash
# The `cluster` stage: build (or reuse) Kubernetes, build the plugin image from the tree, bring the
# cluster up, load the image, run tests/cluster/e2e, tear down and check nothing is left.
#
#   tests/cluster/run_e2e.sh [pytest args...]
#
# Environment: HYGON_DCU_TEST_IMAGE (default localhost/hygon-dcu-plugin:test), the image the
# image stage builds; built here again from the tree (podman's layer cache makes that quick).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo"
: "${HYGON_DCU_TEST_IMAGE:=localhost/hygon-dcu-plugin:test}"
: "${CONTAINERS_CONF:=$repo/plugin_image/containers.conf}"
export HYGON_DCU_TEST_IMAGE CONTAINERS_CONF

timed() {
    local name=$1 start=$SECONDS
    shift
    echo "[cluster-e2e] $name: start"
    "$@"
    echo "[cluster-e2e] $name: done ($((SECONDS - start))s)"
}

timed build tests/cluster/cluster.sh build
make -s -C tests/simulator
# Built every time, never reused by tag: an image left from older code would test that code.
# podman's layer cache makes an unchanged tree quick.
tests/image/install_tools.sh
timed image plugin_image/tools/build_image.sh --tag "$HYGON_DCU_TEST_IMAGE" \
    --base "${HYGON_DCU_BASE_IMAGE:-local}"
# The inner script expands its variables itself, inside the cluster environment. The slowest
# tests are listed at the end: where the tier's time goes, for whoever has to cut it.
# shellcheck disable=SC2016
timed e2e tests/cluster/cluster.sh run bash -c '
    tests/cluster/cluster.sh load-image "$HYGON_DCU_TEST_IMAGE" &&
    .venv/bin/pytest tests/cluster/e2e -p no:cacheprovider --timeout=2700 -v --durations=15 "$@"' e2e "$@"
