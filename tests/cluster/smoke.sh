#!/usr/bin/env bash
# Proves a cluster of this tier works end to end; run it inside one:
#   tests/cluster/cluster.sh run tests/cluster/smoke.sh
# A pod of the workload image (imagePullPolicy: Never) reaches Running, `kubectl logs` and
# `kubectl exec` work (the apiserver reaches the kubelet), and from the pod's network namespace
# the `kubernetes` Service IP answers with the pod's ServiceAccount token recognised.
set -Eeuo pipefail

for name in KUBECONFIG HYGON_DCU_CLUSTER_KUBECTL HYGON_DCU_CLUSTER_NODE HYGON_DCU_CLUSTER_WORKLOAD_IMAGE \
    HYGON_DCU_CLUSTER_SERVICE_API HYGON_DCU_CLUSTER_CONTAINERD_SOCKET; do
    [[ -n "${!name:-}" ]] || { echo "smoke: $name is not set: run under cluster.sh run" >&2; exit 2; }
done
kubectl() {
    "$HYGON_DCU_CLUSTER_KUBECTL" --request-timeout=20s "$@"
}
fail() {
    echo "smoke: FAIL: $*" >&2
    exit 1
}
started="$SECONDS"
pod=smoke-workload
namespace=default

kubectl get node "$HYGON_DCU_CLUSTER_NODE" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}' |
    grep -qx True || fail "node $HYGON_DCU_CLUSTER_NODE is not Ready"

kubectl apply -f - >/dev/null <<POD
apiVersion: v1
kind: Pod
metadata:
  name: $pod
  namespace: $namespace
spec:
  nodeName: $HYGON_DCU_CLUSTER_NODE
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: $HYGON_DCU_CLUSTER_WORKLOAD_IMAGE
    imagePullPolicy: Never
    command: ["/bin/sh", "-c", "echo smoke-log-line; exec sleep infinity"]
POD
kubectl wait -n "$namespace" --for=condition=Ready "pod/$pod" --timeout=120s >/dev/null ||
    fail "pod $pod not Ready: $(kubectl get pod -n "$namespace" "$pod" -o jsonpath='{.status}')"
echo "smoke: pod Running after $((SECONDS - started)) s"

logs="$(kubectl logs -n "$namespace" "$pod")"
[[ "$logs" == *smoke-log-line* ]] || fail "kubectl logs gave '$logs'"
echo "smoke: kubectl logs ok"

# shellcheck disable=SC2016  # expanded in the pod
probe="$(kubectl exec -n "$namespace" "$pod" -- /bin/sh -c 'test -x /usr/local/bin/dcu-probe && echo "$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT"')"
[[ "$probe" == "$HYGON_DCU_CLUSTER_SERVICE_API" ]] ||
    fail "kubectl exec: dcu-probe missing or the pod sees the API at '$probe', not $HYGON_DCU_CLUSTER_SERVICE_API"
echo "smoke: kubectl exec ok (dcu-probe present, API at $probe)"

# The pod image has no TLS client: the host's curl runs in the pod's network namespace with the
# pod's own token and CA, so the request takes the pod's route, the DNAT and the token check.
container_id="$(kubectl get pod -n "$namespace" "$pod" -o jsonpath='{.status.containerStatuses[0].containerID}')"
container_id="${container_id#containerd://}"
pid="$(ctr --address "$HYGON_DCU_CLUSTER_CONTAINERD_SOCKET" -n k8s.io tasks ls |
    awk -v id="$container_id" '$1 == id { print $2 }')"
[[ "$pid" =~ ^[0-9]+$ ]] || fail "no task for container $container_id"
secrets=/var/run/secrets/kubernetes.io/serviceaccount
token="$(kubectl exec -n "$namespace" "$pod" -- cat "$secrets/token")"
ca="$(mktemp)"
trap 'rm -f "$ca"' EXIT
kubectl exec -n "$namespace" "$pod" -- cat "$secrets/ca.crt" >"$ca"
answer="$(nsenter --net="/proc/$pid/ns/net" curl -sS --max-time 10 --cacert "$ca" \
    -H "Authorization: Bearer $token" "https://$HYGON_DCU_CLUSTER_SERVICE_API/api/v1/namespaces/$namespace/pods")" ||
    fail "the Service IP did not answer from the pod's network namespace"
# The default ServiceAccount may not list pods: a 403 naming it proves the token was accepted.
[[ "$answer" == *'User \"system:serviceaccount:default:default\" cannot list resource \"pods\"'* ]] ||
    fail "unexpected answer through the Service IP: $answer"
echo "smoke: API through $HYGON_DCU_CLUSTER_SERVICE_API from the pod's netns ok (token of system:serviceaccount:default:default)"

kubectl delete pod -n "$namespace" "$pod" --wait=false >/dev/null
echo "smoke: passed in $((SECONDS - started)) s"
