# shellcheck shell=bash
# Keys, certificates, tokens and kubeconfigs of one cluster, made fresh by every `up` under
# $CLUSTER_WORK/pki. Sourced by cluster.sh after common.sh.

new_key() {
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null
    chmod 600 "$1"
}

# issue_cert NAME SUBJECT EXTENDED_USAGE [SANS]: NAME.key/NAME.crt signed by the cluster CA.
issue_cert() {
    local name="$1" subject="$2" usage="$3" sans="${4:-}" ext="$PKI/$1.ext"
    new_key "$PKI/$name.key"
    {
        echo "basicConstraints = critical, CA:FALSE"
        echo "keyUsage = critical, digitalSignature, keyEncipherment"
        echo "extendedKeyUsage = $usage"
        [[ -n "$sans" ]] && echo "subjectAltName = $sans"
    } >"$ext"
    openssl req -new -key "$PKI/$name.key" -subj "$subject" -out "$PKI/$name.csr" 2>/dev/null
    openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
        -days 30 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
    rm -f "$PKI/$name.csr" "$ext"
}

write_kubeconfig() {
    local path="$1" user="$2" token="$3"
    cat >"$path" <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
- name: hygon-dcu
  cluster:
    server: https://$BRIDGE_IP:$APISERVER_PORT
    certificate-authority: $PKI/ca.crt
users:
- name: $user
  user:
    token: $token
contexts:
- name: hygon-dcu
  context:
    cluster: hygon-dcu
    user: $user
current-context: hygon-dcu
KUBECONFIG
    chmod 600 "$path"
}

# Token auth users: NAME USER GROUPS. The controller manager and scheduler users are the ones
# the bootstrap RBAC roles are bound to; the kubelet's is the one the Node authorizer expects.
make_pki() {
    local node="$1"
    mkdir -p "$PKI"
    chmod 700 "$PKI"
    new_key "$PKI/ca.key"
    openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=hygon-dcu-cluster-ca" -days 30 \
        -addext "basicConstraints = critical, CA:TRUE" \
        -addext "keyUsage = critical, keyCertSign, cRLSign, digitalSignature" \
        -out "$PKI/ca.crt" 2>/dev/null
    issue_cert apiserver "/CN=kube-apiserver" serverAuth \
        "DNS:kubernetes, DNS:kubernetes.default, DNS:kubernetes.default.svc, DNS:kubernetes.default.svc.cluster.local, DNS:localhost, IP:127.0.0.1, IP:$BRIDGE_IP, IP:$SERVICE_API_IP"
    # system:masters: the kubelet lets the apiserver proxy logs/exec/port-forward.
    issue_cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
    issue_cert kubelet "/CN=$node" serverAuth "DNS:$node, IP:$BRIDGE_IP, IP:127.0.0.1"
    new_key "$PKI/service-account.key"
    openssl pkey -in "$PKI/service-account.key" -pubout -out "$PKI/service-account.pub" 2>/dev/null

    local name user groups token tokens=""
    while read -r name user groups; do
        token="$(openssl rand -hex 24)"
        tokens+="$token,$user,$user,\"$groups\""$'\n'
        write_kubeconfig "$PKI/$name.kubeconfig" "$user" "$token"
    done <<USERS
admin hygon-dcu-admin system:masters
controller-manager system:kube-controller-manager system:authenticated
scheduler system:kube-scheduler system:authenticated
kubelet system:node:$node system:nodes
USERS
    printf '%s' "$tokens" >"$PKI/tokens.csv"
    chmod 600 "$PKI/tokens.csv"
}
