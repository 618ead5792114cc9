#!/usr/bin/env bash
# An operator's install, followed literally: build the collection tarball, run the commands of
# the "Install" block of docs/install.md (README.md must carry the same block) in a fresh HOME
# with nothing but python3 on PATH, then run, from the installed collection only,
#   docs/operating.md's simulated-node commands (enable_mig, disable_mig; the simulator as it
#                                  ships in the collection), Kubernetes off, and
#   hygon.dcu.deploy_device_plugin in render mode (manifests to a directory, no cluster), and
#   plugin_image/tools/build_image.sh --dry-run (it reads the installed MANIFEST.json).
# Prints each step's duration. Needs what the Install block needs (a PyPI index, python3-venv);
# never Ansible Galaxy.
#   bash tests/tools/install_test.sh [WORK_DIR]      (default: a new temporary directory)
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
work=${1:-$(mktemp -d "${TMPDIR:-/tmp}/hygon-dcu-install.XXXXXX")}
mkdir -p "$work"
work=$(cd "$work" && pwd)
# shellcheck source=tests/tools/steps.sh
source "$repo/tests/tools/steps.sh"

# marked_block FILE MARKER: the fenced sh block right after the <!-- MARKER --> line of a
# markdown file.
marked_block() {
  awk -v marker="<!-- $2 -->" '$0 == marker { armed = 1; next }
       armed && /^```sh$/ { inside = 1; next }
       inside && /^```$/ { exit }
       inside { print }' "$1"
}
install_block() { marked_block "$1" install-commands; }

step "read the Install section"
block=$(install_block "$repo/docs/install.md")
[ -n "$block" ] || fail "docs/install.md has no <!-- install-commands --> sh block"
[ "$block" = "$(install_block "$repo/README.md")" ] \
  || fail "README.md's Install block differs from docs/install.md's"
printf '%s\n' "$block" | sed 's/^/    /'
done_step

step "build the collection tarball"
version=$(awk -F': *' '$1 == "version" { print $2; exit }' "$repo/galaxy.yml")
tarball="hygon-dcu-$version.tar.gz"
grep -qF "$tarball" <<<"$block" || fail "the Install block does not install $tarball (galaxy.yml version $version)"
rm -rf "$work/dist" && mkdir -p "$work/dist"
"$repo/.venv/bin/ansible-galaxy" collection build --force --output-path "$work/dist" "$repo" >/dev/null
[ -f "$work/dist/$tarball" ] || fail "ansible-galaxy built no $tarball"
done_step

# Nothing of this machine's Ansible set-up may leak in: empty HOME, no ANSIBLE_* or PYTHON*
# variables, PATH without the repository's venv. The caller's pip settings (index, CA) stay.
home="$work/home"
rm -rf "$home" && mkdir -p "$home"
clean_env=(env -i "HOME=$home" "PATH=/usr/local/bin:/usr/bin:/bin" "LANG=C.UTF-8"
           "XDG_CONFIG_HOME=${XDG_CONFIG_HOME:-${HOME}/.config}" "TMPDIR=${TMPDIR:-/tmp}")
while IFS='=' read -r name _; do
  case $name in PIP_*|SSL_CERT_FILE|REQUESTS_CA_BUNDLE) clean_env+=("$name=${!name}") ;; esac
done < <(env)

step "follow the Install section"
(cd "$work/dist" && "${clean_env[@]}" bash -euxc "$block") || fail "an Install command failed"
done_step

# Where the Install block put ansible-playbook: the activate line it runs.
activate=$(grep -oE '^\. [^ ]+/bin/activate' <<<"$block" | head -1 | cut -d' ' -f2) \
  || fail "the Install block does not activate a venv"
run_installed() {
  (cd "$work" && "${clean_env[@]}" bash -euc ". $activate && \"\$@\"" run "$@")
}
playbook=$(run_installed command -v ansible-playbook)
case $playbook in "$home"/*) ;; *) fail "ansible-playbook came from $playbook, not the installed venv" ;; esac
installed=$(run_installed ansible-galaxy collection list hygon.dcu --format json)
grep -q "\"$home/" <<<"$installed" || fail "hygon.dcu is not installed under $home: $installed"

step "docs/operating.md's simulated-node commands, from the installed collection"
sim_block=$(marked_block "$repo/docs/operating.md" simulated-node-commands)
[ -n "$sim_block" ] || fail "docs/operating.md has no <!-- simulated-node-commands --> sh block"
run_installed bash -euc "$sim_block" >"$work/simulated-node.log" 2>&1 \
  || { tail -40 "$work/simulated-node.log"; fail "a simulated-node command failed (log: $work/simulated-node.log)"; }
grep -q "^mode: enabled$" "$work/simulated-node.log" \
  || fail "enable_mig exited 0 but the simulated node's mode was not enabled (log: $work/simulated-node.log)"
grep -q "roles/mig_node" <(grep -F "$home/" "$work/simulated-node.log") \
  || fail "the playbooks did not run the installed role (log: $work/simulated-node.log)"
grep -c "^PLAY RECAP" "$work/simulated-node.log" | grep -qx 2 \
  || fail "expected enable_mig and disable_mig to run (log: $work/simulated-node.log)"
done_step

step "hygon.dcu.deploy_device_plugin in render mode"
render="$work/render"
rm -rf "$render"
run_installed ansible-playbook hygon.dcu.deploy_device_plugin -i localhost, -c local \
  -e 'ansible_python_interpreter={{ ansible_playbook_python }}' \
  -e "hygon_dcu_device_plugin_render_dir=$render" >"$work/deploy.log" 2>&1 \
  || { tail -40 "$work/deploy.log"; fail "deploy_device_plugin failed (log: $work/deploy.log)"; }
grep -rqs "hygon.com/dcu.present" "$render" \
  || fail "no rendered manifest selects hygon.com/dcu.present nodes (in $render)"
done_step

step "plugin_image/tools/build_image.sh --dry-run from the installed collection"
installed_root="$home/.ansible/collections/ansible_collections/hygon/dcu"
[ ! -e "$installed_root/galaxy.yml" ] || fail "the installed collection has a galaxy.yml: this step would prove nothing"
plan=$(cd "$work" && "${clean_env[@]}" sh "$installed_root/plugin_image/tools/build_image.sh" --dry-run) \
  || fail "build_image.sh --dry-run failed from the installed collection"
grep -q "hygon-dcu-plugin:$version from .*version $version" <<<"$plan" || fail "unexpected plan: $plan"
printf '    %s\n' "$plan"
done_step

log "ok: installed from $tarball with the Install section alone (work dir $work)"
