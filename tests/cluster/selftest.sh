#!/usr/bin/env bash
# The tier's own test (root; minutes): build reuse, two full up/smoke/down/check-clean cycles,
# the node helpers, and the refusals. Not part of the product's tests.
#
#   tests/cluster/selftest.sh
set -Eeuo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cluster="$here/cluster.sh"
failures=0
pass() { echo "selftest: PASS: $*"; }
fail() {
    echo "selftest: FAIL: $*" >&2
    failures=$((failures + 1))
}
seconds() {
    local started="$SECONDS" status=0
    "$@" || status=$?
    echo "selftest: '$*' took $((SECONDS - started)) s (exit $status)"
    return "$status"
}

# expect_refusal WHAT MESSAGE: `up` must exit 3 with MESSAGE and start nothing.
expect_refusal() {
    local what="$1" message="$2" status=0 out
    out="$("$cluster" up 2>&1)" || status=$?
    if ((status == 3)) && [[ "$out" == *"refusing to start: $message"* ]]; then
        pass "up refuses $what"
    else
        fail "up with $what: exit $status, output: $out"
    fi
}

# After the stand-in is gone: the refused up must have started nothing.
expect_clean() {
    "$cluster" check-clean >/dev/null 2>&1 || fail "a refused up left something: $("$cluster" check-clean 2>&1)"
}

if [[ "$("$cluster" build 2>&1 >/dev/null)" == *"reusing build"* ]]; then
    pass "second build reuses the cache"
else
    fail "build did not reuse the cache"
fi

for round in 1 2; do
    if seconds "$cluster" run "$here/smoke.sh"; then
        pass "round $round: up, smoke, down, check-clean"
    else
        fail "round $round: cluster.sh run smoke.sh"
    fi
done

# Node helpers: a pod survives kill-containers (the kubelet restarts it), the kubelet restarts.
# shellcheck disable=SC2016  # expanded inside the cluster's environment
helpers='
set -euo pipefail
kubectl run helper-check --image="$HYGON_DCU_CLUSTER_WORKLOAD_IMAGE" --image-pull-policy=Never \
    --restart=Always --command -- /bin/sleep infinity >/dev/null
kubectl wait --for=condition=Ready pod/helper-check --timeout=120s >/dev/null
"$0" kill-containers
kubectl wait --for=condition=Ready pod/helper-check --timeout=120s >/dev/null
until [[ "$(kubectl get pod helper-check -o jsonpath="{.status.containerStatuses[0].restartCount}")" -ge 1 ]]; do sleep 1; done
"$0" restart-kubelet
"$0" kill-kubelet
"$0" start-kubelet
kubectl wait --for=condition=Ready pod/helper-check --timeout=120s >/dev/null
echo helpers ok
'
if seconds "$cluster" run bash -c "$helpers" "$cluster"; then
    pass "kill-containers, restart-kubelet, kill-kubelet, start-kubelet"
else
    fail "node helpers"
fi

# Refusals. A process whose working directory is /var/lib/kubelet stands for another kubelet.
if [[ ! -e /var/lib/kubelet ]]; then
    mkdir /var/lib/kubelet
    (cd /var/lib/kubelet && exec sleep 300) &
    holder=$!
    expect_refusal "a foreign owner of /var/lib/kubelet" "/var/lib/kubelet is in use by another process: $holder sleep"
    kill "$holder"
    wait "$holder" 2>/dev/null || true
    expect_clean
    touch /var/lib/kubelet/state-of-another-kubelet
    expect_refusal "a /var/lib/kubelet it did not make" "/var/lib/kubelet has content this tier did not make"
    rm -rf /var/lib/kubelet
    expect_clean
else
    fail "/var/lib/kubelet exists before the refusal tests: not touching it"
fi
fake="$(mktemp -d)"
cp /bin/sleep "$fake/kubelet"
"$fake/kubelet" 300 &
impostor=$!
expect_refusal "a kubelet it did not start" "a kubelet/apiserver not started by this tier runs: $impostor kubelet"
kill "$impostor"
wait "$impostor" 2>/dev/null || true
rm -rf "$fake"
expect_clean

ready="$(mktemp -u)"
python3 -c 'import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("127.0.0.1", 2379)); s.listen(); open(sys.argv[1], "w").close(); time.sleep(300)' "$ready" &
listener=$!
while [[ ! -e "$ready" ]] && kill -0 "$listener" 2>/dev/null; do sleep 0.2; done
if [[ -e "$ready" ]]; then
    expect_refusal "a taken port" "ports taken: 2379 127.0.0.1:2379"
else
    fail "could not listen on 127.0.0.1:2379 for the taken-port test"
fi
kill "$listener"
wait "$listener" 2>/dev/null || true
rm -f "$ready"
expect_clean

# A cluster whose `run` is gone (killed before its teardown) is taken down by the next `up`;
# one brought up by hand (no run owns it) is refused.
if HYGON_DCU_CLUSTER_RUN_OWNER="999999999 1" seconds "$cluster" up >/dev/null; then
    status=0
    out="$("$cluster" up 2>&1)" || status=$?
    if ((status == 0)) && [[ "$out" == *"the cluster left by run 999999999, which is gone, is taken down first"* ]]; then
        pass "up takes down the cluster of a run that is gone"
    else
        fail "up over an abandoned cluster: exit $status, output: $out"
    fi
    expect_refusal "a cluster brought up by hand" "a cluster of this tier is up or was not taken down"
else
    fail "up as a run that is gone"
fi
"$cluster" down >/dev/null 2>&1 || fail "down after the abandoned-cluster test"
expect_clean

if ((failures)); then
    echo "selftest: $failures failure(s)" >&2
    exit 1
fi
echo "selftest: all passed"
