#!/usr/bin/env bash
# The demo: both halves of the product on the embedded simulated Hygon node.
#
#   1-3  the operator's playbook hygon.dcu.enable_mig turns it into a partition node (twice: the
#        second run changes nothing); a workload sees no device yet.
#   4-7  the real device plugin (hygon-dcu-plugin serve) serves the node to a kubelet emulator
#        (the kubelet's gRPC services) with a small fake API server for the pods; a pod's
#        Allocate carves its partition, the workload's container sees exactly it, the pod ends
#        and the plugin reclaims the partition (tests/tools/demo_runtime.py).
#   8    hygon.dcu.disable_mig tears down and switches the mode off.
#   9-12 the device plugin again, now serving whole cards and logical slices: two pods get a
#        slice each on one card, each container sees only its own, both go when the pods end.
#
# The simulated node lives under .build/demo-node (a fresh driver install each run;
# HYGON_DCU_DEMO_NODE overrides the path). Kubernetes steps of the playbooks are switched off:
# there is no cluster here. Every process the demo starts is stopped when it ends, also on failure.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/tools/bootstrap.sh
source "$repo/tests/tools/bootstrap.sh"

setup_or_die() { "$@" || { log "setup step $1 failed"; exit 1; }; }
setup_or_die apt_packages demo
setup_or_die python_venv demo
make -s -C tests/simulator

node="${HYGON_DCU_DEMO_NODE:-$repo/.build/demo-node}"
sim="$repo/tests/simulator"
# Sockets, grants and locks of the runtime half: a short path (unix sockets stay under 108 bytes).
state=$(mktemp -d /tmp/hygon-demo.XXXXXX)
runtime_pid=""

# Stop what the demo started, by id: the runtime half (which stops the plugin itself), then the
# plugin should the runtime half have died without stopping it.
cleanup() {
  local rc=$? pid=""
  trap - EXIT INT TERM HUP
  if [ -n "$runtime_pid" ] && kill -0 "$runtime_pid" 2>/dev/null; then
    kill -TERM "$runtime_pid" 2>/dev/null || true
    wait "$runtime_pid" 2>/dev/null || true
  fi
  [ -s "$state/plugin.pid" ] && pid=$(cat "$state/plugin.pid")
  if [ -n "$pid" ] && grep -qs hygon-dcu-plugin "/proc/$pid/cmdline"; then
    kill -TERM "$pid" 2>/dev/null || true
    sleep 1
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
  fi
  rm -rf "$state"
  [ "$rc" -eq 0 ] || log "demo FAILED (exit $rc)"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

logs="$node.logs"
rm -rf "$node" "$logs"
mkdir -p "$logs"
"$sim/simnode" init "$node" --model c3000-bw --cards 2
export HYDMI_SIM_ROOT="$node"

# Prints "$ LABEL" and runs the rest, its output indented; its exit status is kept.
shown() {
  printf '    $ %s\n' "$1"
  shift
  "$@" 2>&1 | sed 's/^/    /'
}

# Runs a playbook with its full output in $logs/NAME.log; prints the role's one-line summary of
# the run and the recap (the whole output when it fails).
playbook() {
  local out="$logs/$2.log"
  printf '    $ ansible-playbook hygon.dcu.%s   (full output: %s)\n' "$1" "$out"
  if ! ansible-playbook -i localhost, -c local "hygon.dcu.$1" \
    -e target=localhost \
    -e hygon_dcu_manage_kubernetes=false \
    -e hygon_dcu_host_root="$node" \
    -e ansible_python_interpreter="$py" \
    -e hygon_dcu_library_path="$node/opt/hyhal/lib/libhydmi_mig.so.1" \
    -e hygon_dcu_hy_smi_path="$node/opt/hyhal/bin/hy-smi" \
    -e "{\"hygon_dcu_environment\": {\"HYDMI_SIM_ROOT\": \"$node\"}}" >"$out" 2>&1; then
    cat "$out"
    log "hygon.dcu.$1 failed"
    return 1
  fi
  sed -n 's/^ *"msg": "\(localhost: .*\)"$/    summary: \1/p' "$out" | tail -n 1
  grep -A1 '^PLAY RECAP' "$out" | tail -n 1 | sed 's/^\([^ ]*\) *: */    recap: \1 /; s/ *$//'
}

log "1/12 enable partition mode on the simulated node (hygon.dcu.enable_mig)"
playbook enable_mig 1-enable_mig

log "2/12 running it again changes nothing"
playbook enable_mig 2-enable_mig-again

log "3/12 mode on, nothing carved: a workload sees no device"
shown "hy-smi mig -lgi" "$sim/build/hy-smi" mig -lgi
# The probe looks at its own filesystem view; HYDMI_PROBE_VIEW shows it the simulated host's.
shown "HYDMI_PROBE_VIEW=<node> dcu-probe" env HYDMI_PROBE_VIEW="$node" "$sim/build/dcu-probe" ||
  true

# 4/12 to 7/12: the device plugin, the kubelet emulator and the fake API server.
PYTHONPATH="$collections:$repo/tests/unit/plugin_image:$repo/tests/support:$sim" \
  "$py" "$repo/tests/tools/demo_runtime.py" --node "$node" --state "$state" \
  --plugin-log "$logs/plugin.log" --collections "$collections" --first-step 4 --total 12 &
runtime_pid=$!
wait "$runtime_pid"
runtime_pid=""

log "8/12 back to whole cards (hygon.dcu.disable_mig): leftover instances go first, then the mode"
playbook disable_mig 8-disable_mig
shown "hy-smi" "$sim/build/hy-smi"

# 9/12 to 12/12: the mode is off, so the plugin serves whole cards and logical slices.
rm -rf "${state:?}"/*
PYTHONPATH="$collections:$repo/tests/unit/plugin_image:$repo/tests/support:$sim" \
  "$py" "$repo/tests/tools/demo_runtime.py" --node "$node" --state "$state" \
  --plugin-log "$logs/plugin-slices.log" --collections "$collections" --first-step 9 \
  --total 12 --slices &
runtime_pid=$!
wait "$runtime_pid"
runtime_pid=""
log "demo finished: node at $node, logs in $logs"
