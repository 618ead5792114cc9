#!/usr/bin/env bash
# The whole test suite, from nothing: apt packages, a venv in the repository, every tier.
#
#   tests/tools/test-all.sh              run every stage, the real-cluster tier (tests/cluster) last
#   tests/tools/test-all.sh ruff pytest  run only the named stages (setup stages always run)
#   tests/tools/test-all.sh quick        the inner loop: generated, simulator, ruff, mypy and the
#                                        pure and simulator tests (no playbook, no image, no
#                                        cluster); a few minutes
#
# Each stage prints its name and duration; the run fails if any stage fails, and pytest finding no
# tests counts as a failure. Works offline given a PyPI mirror and a Debian mirror.
set -uo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
# shellcheck source=tests/tools/bootstrap.sh
source "$repo/tests/tools/bootstrap.sh"
workspace="$repo/.build/ws/ansible_collections/hygon/dcu"

failed=()
summary=()

# stage NAME CMD...: run one stage, record its duration and outcome; never aborts the run.
stage() {
  local name=$1; shift
  if [ ${#selected[@]} -gt 0 ] && [[ " ${selected[*]} " != *" $name "* ]]; then
    return 0
  fi
  log "stage $name: start"
  local start=$SECONDS
  "$@"
  local rc=$?
  local took=$((SECONDS - start))
  if [ $rc -eq 0 ]; then
    log "stage $name: ok (${took}s)"
    summary+=("ok     ${took}s  $name")
  else
    log "stage $name: FAILED rc=$rc (${took}s)"
    summary+=("FAILED ${took}s  $name")
    failed+=("$name")
  fi
  return 0
}

# background NAME CMD...: run CMD (which calls stage) beside the next stages: image builds wait
# on mirrors and disk more than on the CPU. Its output goes to a log that join_background
# prints, with its stage lines and times, when it is done.
background_pid=""
background_log="$repo/.build/background.log"
background() {
  local name=$1; shift
  mkdir -p "$(dirname "$background_log")"
  log "$name: started in the background (its output follows at the end)"
  # shellcheck disable=SC2030  # the subshell's own summary, handed back through a file
  (
    summary=() failed=()
    "$@"
    : >"$background_log.summary"
    [ ${#summary[@]} -eq 0 ] || printf '%s\n' "${summary[@]}" >"$background_log.summary"
  ) >"$background_log" 2>&1 &
  background_pid=$!
}

join_background() {
  [ -n "$background_pid" ] || return 0
  log "waiting for the background stages"
  wait "$background_pid"
  cat "$background_log"
  local line
  # shellcheck disable=SC2031  # the parent's summary: the background's comes from its file
  while IFS= read -r line; do
    summary+=("$line")
    [[ "$line" == FAILED* ]] && failed+=("${line##* }")
  done <"$background_log.summary"
}

# setup NAME CMD...: a stage everything else needs; its failure ends the run.
setup() {
  local name=$1; shift
  log "setup $name: start"
  local start=$SECONDS
  if ! "$@"; then
    log "setup $name: FAILED ($((SECONDS - start))s); nothing else can run"
    exit 1
  fi
  log "setup $name: ok ($((SECONDS - start))s)"
  summary+=("ok     $((SECONDS - start))s  setup $name")
}

# ansible-test needs the collection at .../ansible_collections/hygon/dcu and lists files with git:
# give it a copy of exactly the files git would ship (tracked plus untracked-not-ignored).
sync_workspace() {
  rm -rf "$workspace"
  mkdir -p "$workspace"
  git ls-files -z --cached --others --exclude-standard \
    | rsync -a --from0 --ignore-missing-args --files-from=- ./ "$workspace/" || return 1
  (cd "$workspace" && git init -q . && git add -A && \
    git -c user.name=ci -c user.email=ci@localhost commit -q -m workspace) || return 1
  make -s -C "$workspace/tests/simulator" >/dev/null
}

generated_current() {
  "$py" plugin_image/tools/generate_role_vocabulary.py --check || return 1
  "$py" plugin_image/tools/generate_stubs.py --check
}

simulator_build() {
  make -C tests/simulator
}

ruff_check() {
  # ruff's layout is pep8-clean, which ansible-test sanity checks on every Python file.
  ruff check . && ruff format --check .
}

mypy_check() {
  # Import names must match the collection's real name, so mypy reads the collection through
  # the venv's ansible_collections link.
  (cd "$repo" && mypy \
    "$collections/ansible_collections/hygon/dcu/plugins" \
    plugin_image/src/hygon_dcu_plugin tests/simulator/simnode.py bench tests/tools \
    tests/unit tests/simulator/tests tests/image tests/cluster/e2e tests/conftest.py)
}

yamllint_check() {
  yamllint -s .
}

pytest_run() {
  # Two workers keep both cores busy; work stealing evens out the long role tests. The slowest
  # are listed at the end: where the stage's time goes.
  pytest -q -p no:cacheprovider --timeout=600 -n 2 --dist worksteal --durations=15
  local rc=$?
  [ $rc -eq 5 ] && log "pytest collected no tests: that is a failure"
  return $rc
}

pytest_quick() {
  # The pure, protocol and simulator-backed tests: no ansible-playbook, no image, no cluster.
  pytest -q -p no:cacheprovider --timeout=600 -n 2 --dist worksteal \
    tests/unit/plugin_image tests/unit/plugins/module_utils tests/unit/plugins/filter \
    tests/unit/observability tests/unit/support \
    tests/simulator/tests
  local rc=$?
  [ $rc -eq 5 ] && log "pytest collected no tests: that is a failure"
  return $rc
}

sanity() {
  (cd "$workspace" && ansible-test sanity --python 3.11 --color no)
}

integration() {
  (cd "$workspace" && ansible-test integration --local --python 3.11 --color no)
}

lint() {
  ansible-lint --profile production --offline
}

molecule_run() {
  molecule test --all
}

artifact() {
  rm -rf .build/dist && mkdir -p .build/dist
  ansible-galaxy collection build --force --output-path .build/dist . || return 1
  "$py" tests/tools/check_artifact.py .build/dist/hygon-dcu-*.tar.gz
}

importer() {
  "$py" tests/tools/run_galaxy_importer.py .build/dist/hygon-dcu-*.tar.gz
}

image() {
  bash tests/image/run.sh
}

execution_environment() {
  # The AWX EE built from PyPI and Debian mirrors only, and enable_mig run inside it.
  bash tests/tools/ee_test.sh
}

image_stages() {
  stage image image
  stage ee execution_environment
}

install_offline() {
  bash tests/tools/install_test.sh
}

ansible_floor() {
  # The role and module tests on the oldest ansible-core declared, and the oldest node Python.
  bash tests/tools/floor_test.sh
}

cluster() {
  bash tests/cluster/run_e2e.sh
}

selected=("$@")
quick_only=false
if [[ " ${selected[*]} " == *" quick "* ]]; then
  quick_only=true
  selected+=(generated simulator ruff mypy pytest-quick)
fi
total_start=$SECONDS
setup apt apt_packages
setup venv python_venv
setup workspace sync_workspace

stage generated generated_current
stage simulator simulator_build
stage ruff ruff_check
stage mypy mypy_check
stage yamllint yamllint_check
# The images (device-plugin image, then the AWX EE, which reuses its base image) build while
# the Python stages run.
background images image_stages
# Only when named (`quick`): the whole pytest stage below runs the same tests and more.
if [[ " ${selected[*]} " == *" pytest-quick "* ]]; then
  stage pytest-quick pytest_quick
fi
stage pytest pytest_run
stage sanity sanity
stage integration integration
stage ansible-lint lint
stage molecule molecule_run
stage build artifact
stage galaxy-importer importer
stage install install_offline
stage floor ansible_floor
join_background
# The real-cluster tier, last: it needs the whole machine (a Kubernetes node), and reuses the
# Kubernetes build cached outside the repository (tests/cluster/README.md).
stage cluster cluster

log "summary (total $((SECONDS - total_start))s):"
printf '  %s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  log "FAILED stages: ${failed[*]}"
  exit 1
fi
log "all stages passed"
if $quick_only; then
  log "that was the inner loop; the rest: bash tests/tools/test-all.sh (every tier, the cluster included)"
fi
