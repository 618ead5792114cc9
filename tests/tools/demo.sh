#!/usr/bin/env bash
# The demo: turn the embedded simulated Hygon node into a partition node with the operator's own
# playbook (hygon.dcu.enable_mig), carve one partition the way the device plugin would, show what a
# workload sees, then tear down and go back with hygon.dcu.disable_mig.
#
# The simulated node lives under .build/demo-node (a fresh driver install each run). Kubernetes
# steps are switched off: there is no cluster here, so the node half runs alone.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/tools/bootstrap.sh
source "$repo/tests/tools/bootstrap.sh"

setup_or_die() { "$@" || { log "setup step $1 failed"; exit 1; }; }
setup_or_die apt_packages
setup_or_die python_venv
make -s -C tests/simulator

node="$repo/.build/demo-node"
sim="$repo/tests/simulator"
rm -rf "$node"
"$sim/simnode" init "$node" --model c3000-bw --cards 2
export HYDMI_SIM_ROOT="$node"

playbook() {
  ansible-playbook -i localhost, -c local "hygon.dcu.$1" \
    -e target=localhost \
    -e hygon_dcu_manage_kubernetes=false \
    -e hygon_dcu_host_root="$node" \
    -e ansible_python_interpreter="$py" \
    -e hygon_dcu_library_path="$node/opt/hyhal/lib/libhydmi_mig.so.1" \
    -e hygon_dcu_hy_smi_path="$node/opt/hyhal/bin/hy-smi" \
    -e "{\"hygon_dcu_environment\": {\"HYDMI_SIM_ROOT\": \"$node\"}}"
}

log "1/5 enable partition mode on the simulated node"
playbook enable_mig

log "2/5 running it again changes nothing"
playbook enable_mig

log "3/5 mode on, nothing carved: a workload sees no device"
"$sim/build/hy-smi" mig -lgi || true
# The probe looks at its own filesystem view; HYDMI_PROBE_VIEW shows it the simulated host's.
HYDMI_PROBE_VIEW="$node" "$sim/build/dcu-probe" || true

log "4/5 carve one 2g.15gb partition on card 0 and give it to a workload"
"$sim/build/hy-smi" mig -cgi 2g.15gb -C -i 0
conf=$(find "$node/etc/dmi_mig_config/ci" -name '*.conf' | head -n 1)
uuid=$(sed -n 's/^mig_uuid: *//p' "$conf")
DMI_MIG_VISIBLE_DEVICE="MIG-$uuid" HYDMI_PROBE_VIEW="$node" "$sim/build/dcu-probe"

log "5/5 disable: instances torn down in the forced order, then mode off"
playbook disable_mig
"$sim/build/hy-smi" mig -lgi || true
log "demo finished: node at $node"
