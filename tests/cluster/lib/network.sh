# shellcheck shell=bash
# The cluster's own bridge, the route that keeps the service range on it, the CNI config, and
# the one DNAT that lets pods (and host-network pods) reach the apiserver through the
# `kubernetes` Service IP. Nothing here routes to or from another machine: pods get routes to
# the pod and service ranges only, no default route, no masquerading.
# Sourced by cluster.sh after common.sh.

# PREROUTING for pods, OUTPUT for host-network pods and the host itself.
DNAT_CHAINS=(PREROUTING OUTPUT)

# Prints the rule of CHAIN as NUL-separated iptables arguments.
dnat_rule() {
    local chain="$1"
    local rule=(-d "$SERVICE_API_IP/32" -p tcp --dport 443)
    [[ "$chain" == PREROUTING ]] && rule=(-i "$BRIDGE" "${rule[@]}")
    printf '%s\0' "${rule[@]}" -m comment --comment "$RULE_COMMENT" \
        -j DNAT --to-destination "$BRIDGE_IP:$APISERVER_PORT"
}

network_up() {
    ip link add "$BRIDGE" type bridge
    ip addr add "$BRIDGE_IP/${POD_CIDR#*/}" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    # Service addresses stay on the bridge: without kube-proxy only the DNAT'ed one answers,
    # and the others must not follow the default route off the machine.
    ip route add "$SERVICE_CIDR" dev "$BRIDGE" src "$BRIDGE_IP"
    local chain rule=()
    for chain in "${DNAT_CHAINS[@]}"; do
        mapfile -d '' -t rule < <(dnat_rule "$chain")
        iptables -w 10 -t nat -A "$chain" "${rule[@]}"
    done
}

write_cni_config() {
    local dir="$1"
    mkdir -p "$dir/net.d" "$dir/ipam"
    cat >"$dir/net.d/10-hygon-dcu.conflist" <<CNI
{
  "cniVersion": "0.4.0",
  "name": "hygon-dcu",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "isDefaultGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$dir/ipam",
        "ranges": [[{"subnet": "$POD_CIDR", "gateway": "$BRIDGE_IP"}]],
        "routes": [{"dst": "$SERVICE_CIDR", "gw": "$BRIDGE_IP"}]
      }
    },
    {"type": "loopback"}
  ]
}
CNI
}

# Prints "CHAIN" for each DNAT rule of ours still installed (one line per copy).
our_dnat_rules() {
    local chain
    for chain in "${DNAT_CHAINS[@]}"; do
        iptables -w 10 -t nat -S "$chain" 2>/dev/null |
            grep -F -- "--comment $RULE_COMMENT" | sed "s/^/$chain: /" || true
    done
}

network_down() {
    local chain rule=() veth
    for chain in "${DNAT_CHAINS[@]}"; do
        mapfile -d '' -t rule < <(dnat_rule "$chain")
        while iptables -w 10 -t nat -C "$chain" "${rule[@]}" 2>/dev/null; do
            iptables -w 10 -t nat -D "$chain" "${rule[@]}"
        done
    done
    if ip link show "$BRIDGE" >/dev/null 2>&1; then
        # Pod veths die with their network namespaces; ones whose namespace is still held go here.
        while read -r veth; do
            if [[ -n "$veth" ]]; then
                ip link del "${veth%@*}" 2>/dev/null || true
            fi
        done < <(ip -o link show master "$BRIDGE" | awk -F': ' '{print $2}')
        ip link del "$BRIDGE"
    fi
    # The route goes with the bridge; this catches one left on another device by hand.
    ip route del "$SERVICE_CIDR" dev "$BRIDGE" 2>/dev/null || true
}
