#!/usr/bin/env bash
# The role tests on the oldest ansible-core the collection declares (meta/runtime.yml's
# requires_ansible floor) and the `ansible` package release that bundles it (for kubernetes.core
# and community.crypto at their oldest supported versions): a venv of exactly that, then pytest.
#   bash tests/tools/floor_test.sh [PYTEST_ARGS...]
# (default: the module tests and the representative role runs marked `floor` (each playbook's
# full scenario once, with its check mode and second run), then the simulated-node ones of those
# with the oldest node Python the role accepts. The whole role suite runs once, in the pytest
# stage, on the current ansible-core: running it twice cost CI about 15 minutes.)
# The venv is kept in .build/floor-venv and reused while the floor does not change.
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
log() { printf '[floor_test %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

core=$(sed -nE 's/^requires_ansible: *"?>= *([0-9]+\.[0-9]+\.[0-9]+)"?$/\1/p' meta/runtime.yml)
[ -n "$core" ] || { log "meta/runtime.yml has no requires_ansible: \">=X.Y.Z\" floor"; exit 1; }
minor=$(cut -d. -f2 <<<"$core")
# ansible N.0.0 is the first release on ansible-core 2.(N+7): 11 on 2.18, 12 on 2.19.
bundle="$((minor - 7)).0.0"
venv="$repo/.build/floor-venv"
# The runtime package's own dependencies, for the device_plugin tests (in the stamp: a new one
# makes a new venv).
mapfile -t runtime_deps < <(python3 -c 'import tomllib, sys
print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]))' \
  plugin_image/pyproject.toml)
stamp="ansible-core==$core ansible==$bundle pytest-xdist hypothesis ${runtime_deps[*]}"

start=$SECONDS
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/floor" 2>/dev/null)" != "$stamp" ]; then
  log "venv: $stamp into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  # What the role tests import besides Ansible (and ansible-builder, which the
  # static tests run), plus the runtime dependencies above.
  "$venv/bin/pip" install -q --disable-pip-version-check \
    "ansible-core==$core" "ansible==$bundle" \
    pytest pytest-timeout pytest-xdist hypothesis pyyaml kubernetes kubernetes-validate cryptography cel-python \
    ansible-builder "${runtime_deps[@]}" >"$venv/pip.log" 2>&1 \
    || { grep -v "is ignored: it is neither" "$venv/pip.log"; log "pip install failed"; exit 1; }
  "$venv/bin/python" -c "import ansible.release, sys; sys.exit(ansible.release.__version__ != sys.argv[1])" "$core" \
    || { log "pip did not install ansible-core $core"; exit 1; }
  echo "$stamp" >"$venv/floor"
fi
mkdir -p "$venv/collections/ansible_collections/hygon"
ln -sfn "$repo" "$venv/collections/ansible_collections/hygon/dcu"
log "venv ready ($((SECONDS - start))s): $("$venv/bin/ansible-playbook" --version | head -1)"

# The oldest node Python the role claims (its preflight refuses older ones), found on PATH or
# in pyenv's versions; the node-only role tests run with it as the node's interpreter.
node_floor=$(sed -nE 's/^mig_node__min_python: *"?([0-9]+\.[0-9]+)"?$/\1/p' roles/mig_node/vars/main.yml)
node_python=""
for candidate in "$HOME"/.pyenv/versions/"$node_floor".*/bin/python"$node_floor" \
                 "$(command -v "python$node_floor" || true)"; do
  # A pyenv shim exists for every version but runs only the selected ones: try it.
  if [ -x "$candidate" ] && "$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != tuple(map(int, sys.argv[1].split("."))))' "$node_floor" 2>/dev/null; then
    node_python=$candidate
  fi
done

export PATH="$venv/bin:$PATH" ANSIBLE_COLLECTIONS_PATH="$venv/collections"
failed=()
# pytest from the floor venv: the role tests run that venv's ansible-playbook (runner.py).
if [ $# -gt 0 ]; then
  "$venv/bin/python" -m pytest -q -p no:cacheprovider --timeout=900 -n 2 "$@" || failed+=("pytest $*")
else
  log "pytest tests/unit/plugins/modules and the floor-marked role runs on ansible-core $core"
  "$venv/bin/python" -m pytest -q -p no:cacheprovider --timeout=900 -n 2 --dist worksteal \
    tests/unit/plugins/modules || failed+=("module tests")
  "$venv/bin/python" -m pytest -q -p no:cacheprovider --timeout=900 -n 2 --dist worksteal \
    -m floor tests/unit/roles || failed+=("role runs")
  if [ -z "$node_python" ]; then
    log "no python$node_floor on PATH or in ~/.pyenv: the node Python floor $node_floor is unproven here"
    failed+=("node Python $node_floor")
  else
    log "pytest the floor-marked test_sim_runs.py runs with node Python $node_python"
    HYGON_DCU_NODE_PYTHON="$node_python" "$venv/bin/python" -m pytest -q -p no:cacheprovider \
      --timeout=900 -n 2 -m floor tests/unit/roles/mig_node/test_sim_runs.py \
      || failed+=("node Python $node_floor")
  fi
fi
log "total $((SECONDS - start))s"
if [ ${#failed[@]} -gt 0 ]; then
  log "FAILED on the floor: ${failed[*]}"
  exit 1
fi
log "ok: ansible-core $core / ansible $bundle${node_python:+, node Python $node_floor}"
