# shellcheck shell=bash disable=SC2034  # the settings are used by the other lib/ files
# Shared settings and helpers of tests/cluster/cluster.sh: paths, logging, step timing, packages,
# the Debian mirror. Sourced, never run.

# Command substitutions fail like the commands around them.
shopt -s inherit_errexit

CLUSTER_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPO_DIR="$(cd "$CLUSTER_DIR/../.." && pwd)"
CLUSTER_CACHE="${HYGON_DCU_CLUSTER_CACHE:-/var/cache/hygon-dcu/cluster}"
CLUSTER_WORK="${HYGON_DCU_CLUSTER_WORK:-/var/lib/hygon-dcu-cluster}"
# Hard-coded in kubelet 1.20 for device plugins, so the only root dir that works (see README).
KUBELET_ROOT=/var/lib/kubelet
KUBE_VERSION=v1.20.2
KUBE_COMPONENTS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
DEBIAN_SUITE=bookworm

log() {
    printf '[cluster] %s\n' "$*" >&2
}

# Set by die/refuse: the EXIT trap then has nothing to add.
FAILURE_REPORTED=0
die() {
    printf '[cluster] error: %s\n' "$*" >&2
    FAILURE_REPORTED=1
    exit 1
}

# step NAME COMMAND...: runs COMMAND (errexit stays in force inside it) and prints its duration.
# A failing step ends the script; the EXIT trap of cluster.sh names the step that failed.
CURRENT_STEP=""
step() {
    local name="$1" started="$SECONDS"
    shift
    CURRENT_STEP="$name"
    "$@"
    CURRENT_STEP=""
    log "step $name: $((SECONDS - started)) s"
}

require_root() {
    [[ "$(id -u)" -eq 0 ]] || die "must run as root (containerd, kubelet, iptables, mounts)"
}

# Packages the tier needs; installed only when absent.
CLUSTER_PACKAGES=(
    golang-go make dpkg-dev openssl rsync
    etcd-server containerd runc containernetworking-plugins
    iptables iproute2 util-linux procps
    debootstrap podman
)

ensure_packages() {
    local missing=() installed pkg
    # dpkg-query fails for packages it never saw: those are simply not in the output.
    installed=" $({ dpkg-query -W -f='${db:Status-Abbrev} ${Package}\n' "${CLUSTER_PACKAGES[@]}" 2>/dev/null || true; } |
        awk '$1 == "ii" { printf "%s ", $2 }')"
    for pkg in "${CLUSTER_PACKAGES[@]}"; do
        [[ "$installed" == *" $pkg "* ]] || missing+=("$pkg")
    done
    ((${#missing[@]} == 0)) && return 0
    log "installing: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # Other jobs on the machine may hold the dpkg lock: wait for it instead of failing.
    if ! apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
        apt-get -o DPkg::Lock::Timeout=600 update -qq
        apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
}

# Prints "URI DEBIAN_SUITE COMPONENTS SIGNED_BY" for each Debian suite this host's apt uses (deb822 and
# one-line formats). On an air-gapped site these mirrors are the only ones that answer.
apt_mirrors() {
    local file
    for file in /etc/apt/sources.list.d/*.sources; do
        [[ -f "$file" ]] || continue
        awk '
            function flush() {
                if (types ~ /(^| )deb( |$)/ && uris != "" && suites != "")
                    { n = split(uris, u, " "); m = split(suites, s, " ");
                      for (i = 1; i <= n; i++) for (j = 1; j <= m; j++)
                          print u[i], s[j], (comps == "" ? "main" : comps), (signed == "" ? "-" : signed) }
                types = uris = suites = comps = signed = ""
            }
            /^[ \t]*$/ { flush(); next }
            /^#/ { next }
            /^Types:/ { sub(/^Types:[ \t]*/, ""); types = $0 }
            /^URIs:/ { sub(/^URIs:[ \t]*/, ""); uris = $0 }
            /^Suites:/ { sub(/^Suites:[ \t]*/, ""); suites = $0 }
            /^Components:/ { sub(/^Components:[ \t]*/, ""); comps = $0; gsub(/ /, ",", comps) }
            /^Signed-By:/ { sub(/^Signed-By:[ \t]*/, ""); signed = $0 }
            END { flush() }
        ' "$file"
    done
    for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [[ -f "$file" ]] || continue
        awk '$1 == "deb" && $2 !~ /^\[/ && NF >= 4 {
            comps = $4; for (i = 5; i <= NF; i++) comps = comps "," $i; print $2, $3, comps, "-" }' "$file"
    done
}

# The mirror debootstrap uses: the first one serving the plain bookworm suite.
debian_mirror() {
    if [[ -n "${DEBIAN_MIRROR:-}" ]]; then
        printf '%s\n' "$DEBIAN_MIRROR"
        return
    fi
    local uri suite _rest
    while read -r uri suite _rest; do
        if [[ "$suite" == "$DEBIAN_SUITE" ]]; then
            printf '%s\n' "$uri"
            return
        fi
    done < <(apt_mirrors)
    die "no apt source for suite $DEBIAN_SUITE on this host; set DEBIAN_MIRROR"
}

# Addresses and ports. The control plane listens on loopback, except what pods must reach
# (apiserver, kubelet): those listen on the host side of the cluster's own bridge.
BRIDGE=hygon-dcu0
POD_CIDR=10.244.0.0/24
BRIDGE_IP=10.244.0.1
SERVICE_CIDR=10.96.0.0/24
# The `kubernetes` Service gets the first address of the service range.
SERVICE_API_IP=10.96.0.1
ETCD_CLIENT_PORT=2379
ETCD_PEER_PORT=2380
APISERVER_PORT=6443
KUBELET_PORT=10250
KUBELET_HEALTHZ_PORT=10248
CONTROLLER_MANAGER_PORT=10257
SCHEDULER_PORT=10259
SCHEDULER_HEALTHZ_PORT=10251
CLUSTER_PORTS=(
    "$ETCD_CLIENT_PORT" "$ETCD_PEER_PORT" "$APISERVER_PORT" "$KUBELET_PORT" "$KUBELET_HEALTHZ_PORT"
    "$CONTROLLER_MANAGER_PORT" "$SCHEDULER_PORT" "$SCHEDULER_HEALTHZ_PORT"
)
# Marks the iptables rules of this tier.
RULE_COMMENT=hygon-dcu-cluster
# Says /var/lib/kubelet was made by this tier (its content may be removed by `down`).
KUBELET_ROOT_MARKER="$KUBELET_ROOT/.made-by-hygon-dcu-cluster"

# Work-dir layout (recreated by every `up`).
PKI="$CLUSTER_WORK/pki"
RUN_DIR="$CLUSTER_WORK/run"
LOG_DIR="$CLUSTER_WORK/logs"
CONTAINERD_DIR="$CLUSTER_WORK/containerd"
CONTAINERD_SOCKET="$CONTAINERD_DIR/containerd.sock"
ENV_FILE="$CLUSTER_WORK/env"
# "PID START" of the `run` whose `up` made the cluster (START: the process's start time, so a
# reused PID is not taken for it); absent for a cluster brought up by hand.
RUN_OWNER_FILE="$CLUSTER_WORK/run-owner"

# The node name: this host's name unless told, lower-cased; it becomes file and object names.
node_name() {
    local name="${HYGON_DCU_NODE_NAME:-$(hostname)}"
    name="${name,,}"
    [[ "$name" =~ ^[a-z0-9]([a-z0-9.-]{0,61}[a-z0-9])?$ ]] ||
        die "node name '$name' is not a DNS-1123 name; set HYGON_DCU_NODE_NAME"
    printf '%s\n' "$name"
}

# wait_for SECONDS WHAT COMMAND...: polls COMMAND every half second.
wait_for() {
    local timeout="$1" what="$2" deadline
    shift 2
    deadline=$((SECONDS + timeout))
    until "$@" >/dev/null 2>&1; do
        ((SECONDS < deadline)) || die "timed out after ${timeout} s waiting for $what"
        sleep 0.5
    done
}
