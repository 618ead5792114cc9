# Shared by the scripts that run the operator's playbooks on a simulated node (install_test.sh,
# ee_test.sh): timed steps, and the variables that point the role at a simulated node.
# Sourced, not run.
# shellcheck shell=bash

log() { printf '[%s %s] %s\n' "$(basename "$0" .sh)" "$(date +%H:%M:%S)" "$*"; }
fail() { log "FAILED: $*"; exit 1; }

step_name=""
step_start=$SECONDS
step() { step_name=$1; step_start=$SECONDS; log "step $step_name: start"; }
done_step() { log "step $step_name: ok ($((SECONDS - step_start))s)"; }

# sim_node_inventory NODE: sets node_vars (a JSON object: the variables that run the role on
# localhost against the simulated node at NODE, Kubernetes steps off; the role's host root,
# library and hy-smi, through PATH, are the simulator's) and node_args (the ansible-playbook
# arguments that give them, with a local inventory).
sim_node_inventory() {
  local node=$1
  # shellcheck disable=SC2034  # read by the sourcing script
  node_vars="{\"target\": \"localhost\", \"ansible_python_interpreter\": \"/usr/bin/python3\",
    \"hygon_dcu_manage_kubernetes\": false, \"hygon_dcu_host_root\": \"$node\",
    \"hygon_dcu_library_path\": \"$node/opt/hyhal/lib/libhydmi_mig.so.1\",
    \"hygon_dcu_environment\": {\"HYDMI_SIM_ROOT\": \"$node\",
                              \"PATH\": \"$node/opt/hyhal/bin:/usr/bin:/bin\"}}"
  # shellcheck disable=SC2034  # read by the sourcing script
  node_args=(-i "localhost," -c local -e "$node_vars")
}
