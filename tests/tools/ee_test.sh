#!/usr/bin/env bash
# Builds the AWX execution environment (meta/ee/execution-environment.yml) the offline way and
# runs the operator's playbooks inside it against a simulated node:
#   1. ansible-galaxy collection build            -> .build/ee-collection/hygon-dcu-<v>.tar.gz
#   2. ansible-builder create                     -> .build/ee/ (Containerfile + context)
#   3. podman build                               -> localhost/hygon-dcu-ee:test (size printed)
#   4. in the EE container, network none, -c local, Kubernetes off:
#      hygon.dcu.enable_mig twice (the second run must report changed=0), then
#      hygon.dcu.disable_mig; the simulator's state must show the mode on, then off;
#   5. hygon.dcu.report through ansible-runner (as AWX runs a job), network none: the report
#      must come back as the job's artifact and match the simulator's state.
# Needs: podman (root), a Debian base image (default localhost/debian:bookworm, made by
# plugin_image/tools/base_image.sh when missing), a PyPI index and the Debian mirror of the
# base image's apt sources during the build. Never a container registry or Galaxy.
#
#   bash tests/tools/ee_test.sh [WORK_DIR]      (default: a new temporary directory; holds the
#                                                simulated node and the playbook logs)
# Environment:
#   HYGON_DCU_EE_TAG     image tag (default localhost/hygon-dcu-ee:test)
#   HYGON_DCU_EE_BASE    base image (default localhost/debian:bookworm)
#   PIP_INDEX_URL        the site's PyPI mirror for the build (default: this host's pip
#                        configuration's index-url when it is http(s); else pypi.org)
#   PIP_TRUSTED_HOST     passed on with it (plain-http mirrors)
#   PIP_CERT             CA bundle for the index (default: this host's pip `cert` setting, e.g.
#                        a TLS-inspecting proxy's CA); mounted into the build steps, in no layer
#   CONTAINERS_CONF      default plugin_image/containers.conf (runc, ulimits)
# The image stays (a second run reuses podman's layer cache); the containers are removed.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
work=${1:-$(mktemp -d "${TMPDIR:-/tmp}/hygon-dcu-ee.XXXXXX")}
mkdir -p "$work"
work=$(cd "$work" && pwd)
tag=${HYGON_DCU_EE_TAG:-localhost/hygon-dcu-ee:test}
base=${HYGON_DCU_EE_BASE:-localhost/debian:bookworm}
: "${CONTAINERS_CONF:=$repo/plugin_image/containers.conf}"
export CONTAINERS_CONF

# shellcheck source=tests/tools/steps.sh
source "$repo/tests/tools/steps.sh"

containers=()
cleanup() {
  local name
  for name in "${containers[@]}"; do podman rm -f --ignore "$name" >/dev/null 2>&1 || true; done
}
trap cleanup EXIT

for tool in podman make; do
  command -v "$tool" >/dev/null || fail "$tool is not installed"
done
for tool in ansible-galaxy ansible-builder; do
  [ -x "$repo/.venv/bin/$tool" ] || fail "$repo/.venv/bin/$tool is missing (tests/tools/bootstrap.sh)"
done

step "base image $base"
if [ "$base" = localhost/debian:bookworm ]; then
  "$repo/plugin_image/tools/base_image.sh" "$base" || fail "could not build $base"
fi
podman image exists "$base" || fail "base image $base is not in podman's store"
done_step

step "build the collection tarball"
version=$(awk -F': *' '$1 == "version" { print $2; exit }' "$repo/galaxy.yml")
# meta/ee/execution-environment.yml takes the tarball from here (additional_build_files).
dist="$repo/.build/ee-collection"
rm -rf "$dist" && mkdir -p "$dist"
"$repo/.venv/bin/ansible-galaxy" collection build --force --output-path "$dist" "$repo" >/dev/null \
  || fail "ansible-galaxy collection build failed"
[ -f "$dist/hygon-dcu-$version.tar.gz" ] || fail "ansible-galaxy built no hygon-dcu-$version.tar.gz"
done_step

step "ansible-builder create"
context="$repo/.build/ee"
rm -rf "$context"
"$repo/.venv/bin/ansible-builder" create -f "$repo/meta/ee/execution-environment.yml" -c "$context" \
  >"$work/builder-create.log" 2>&1 || { cat "$work/builder-create.log"; fail "ansible-builder create failed"; }
grep -q '^FROM base AS galaxy' "$context/Containerfile" && fail "the Containerfile has a Galaxy stage"
done_step

# The host's PyPI mirror, unless the caller names one: pip's own configuration (index-url only;
# file:// indexes and find-links on this host's disk do not exist inside the build).
if [ -z "${PIP_INDEX_URL:-}" ]; then
  PIP_INDEX_URL=$(python3 -m pip config get global.index-url 2>/dev/null || true)
  case $PIP_INDEX_URL in http://*|https://*) ;; *) PIP_INDEX_URL= ;; esac
fi
build_args=(--build-arg "EE_BASE_IMAGE=$base")
[ -z "$PIP_INDEX_URL" ] || build_args+=(--build-arg "PIP_INDEX_URL=$PIP_INDEX_URL")
[ -z "${PIP_TRUSTED_HOST:-}" ] || build_args+=(--build-arg "PIP_TRUSTED_HOST=$PIP_TRUSTED_HOST")
ca=${PIP_CERT:-$(python3 -m pip config get global.cert 2>/dev/null || true)}
if [ -n "$ca" ]; then
  [ -s "$ca" ] || fail "PIP_CERT / pip's cert setting names $ca, which is not a file"
  build_args+=(-v "$ca:/run/pip-ca.crt:ro" --build-arg PIP_CERT=/run/pip-ca.crt)
fi

step "podman build $tag (PyPI: ${PIP_INDEX_URL:-pypi.org})"
previous=$(podman image inspect --format '{{.Id}}' "$tag" 2>/dev/null || true)
podman build --network host --layers -f "$context/Containerfile" -t "$tag" "${build_args[@]}" "$context" \
  >"$work/podman-build.log" 2>&1 || { tail -40 "$work/podman-build.log"; fail "podman build failed (log: $work/podman-build.log)"; }
size=$(podman image inspect --format '{{.Size}}' "$tag")
# The image this script built last time, now untagged: drop it (its layers stay as cache).
if [ -n "$previous" ] && [ "$previous" != "$(podman image inspect --format '{{.Id}}' "$tag")" ]; then
  podman rmi "$previous" >/dev/null 2>&1 || true
fi
log "image $tag: $size bytes ($((size / 1048576)) MiB); cached steps: $(grep -c -- '--> Using cache' "$work/podman-build.log" || true)"
grep -E '^(kubernetes\.core|community\.crypto|hygon\.dcu) ' "$work/podman-build.log" | sort -u | sed 's/^/    /' || true
done_step

step "simulated node"
make -s -C "$repo/tests/simulator" >/dev/null || fail "make -C tests/simulator failed"
sim_build="$repo/tests/simulator/build"
node="$work/node"
rm -rf "$node"
"$repo/tests/simulator/simnode" init "$node" >/dev/null || fail "simnode init failed"
done_step

# The node root and the simulator's build directory (the node's library symlinks point there)
# are mounted at the same paths in the container.
sim_node_inventory "$node"
run_count=0
ee_mounts=(-v "$node:$node" -v "$sim_build:$sim_build:ro")
in_ee() {  # in_ee LOG COMMAND...: COMMAND in a fresh EE container, network none, output to LOG
  local out=$1 name
  shift
  run_count=$((run_count + 1))
  name="hygon-dcu-ee-test-$$-$run_count"
  containers+=("$name")
  podman run --name "$name" --network none --user 0 "${ee_mounts[@]}" -e ANSIBLE_FORCE_COLOR=0 \
    "$tag" "$@" >"$out" 2>&1
  local rc=$?
  podman rm -f --ignore "$name" >/dev/null 2>&1 || true
  return $rc
}
recap() { grep -A3 '^PLAY RECAP' "$1" | grep -E 'ok=[0-9]+' | sed 's/^/    /'; }
changed() { grep -A3 '^PLAY RECAP' "$1" | grep -oE 'changed=[0-9]+' | head -1 | cut -d= -f2; }
mode() { "$repo/tests/simulator/simnode" status "$node" | awk '$1 == "mode:" { print $2 }'; }

# in_ee_step LABEL PLAYBOOK MODE [idempotent]: PLAYBOOK in the EE; the node's mode must then be
# MODE, and with "idempotent" the run must have changed nothing.
in_ee_step() {
  local label=$1 playbook=$2 want=$3 idempotent=${4:-} out again
  out="$work/$label.log"
  step "$playbook in the EE ($label)"
  in_ee "$out" ansible-playbook "$playbook" "${node_args[@]}" ||
    { tail -40 "$out"; fail "$playbook failed in the EE (log: $out)"; }
  recap "$out"
  if [ -n "$idempotent" ]; then
    again=$(changed "$out")
    [ -n "$again" ] || fail "no PLAY RECAP in $out"
    [ "$again" = 0 ] || fail "$playbook changed $again task(s) on a second run: not idempotent (log: $out)"
  fi
  [ "$(mode)" = "$want" ] || fail "$playbook exited 0 but the simulated node's mode is $(mode)"
  done_step
}

in_ee_step enable_mig hygon.dcu.enable_mig enabled
in_ee_step enable_mig-again hygon.dcu.enable_mig enabled idempotent
in_ee_step disable_mig hygon.dcu.disable_mig disabled

# The fleet report the way AWX runs a job: ansible-runner in the EE, network none. Its files stay
# in the container (lost with it); the report must come back as the job's artifact, which
# ansible-runner records in the stats event of the job's events (what AWX stores as artifacts).
step "hygon.dcu.report in the EE through ansible-runner: the report as the job's artifact"
runner="$work/runner"
rm -rf "$runner" && mkdir -p "$runner/project" "$runner/inventory" "$runner/env"
printf '%s\n' '- name: The fleet report, as an AWX job template runs it' \
  '  ansible.builtin.import_playbook: hygon.dcu.report' >"$runner/project/report.yml"
printf 'localhost ansible_connection=local\n' >"$runner/inventory/hosts"
printf '%s\n' "$node_vars" >"$runner/env/extravars"
ee_mounts+=(-v "$runner:/runner")
in_ee "$work/report-runner.log" ansible-runner run /runner -p report.yml ||
  { tail -40 "$work/report-runner.log"; fail "ansible-runner run of the report failed (log: $work/report-runner.log)"; }
"$repo/.venv/bin/python" "$repo/tests/tools/report_artifact.py" "$runner/artifacts" \
  "$("$repo/tests/simulator/simnode" status "$node")" ||
  fail "the report's job artifact does not match the simulated node (log: $work/report-runner.log)"
done_step

log "ok: $tag ($((size / 1048576)) MiB) ran enable_mig (twice), disable_mig and the report offline; total $((SECONDS))s (work dir $work)"
