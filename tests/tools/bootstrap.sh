# Shared setup for the README's two commands (demo and tests): apt packages, the venv in the
# repository, the collection made importable by its real name. Sourced, not run.
# shellcheck shell=bash

# The caller sets repo to the repository root before sourcing.
: "${repo:?set repo to the repository root before sourcing bootstrap.sh}"
cd "$repo" || exit 1
venv="$repo/.venv"
py="$venv/bin/python"
collections="$venv/collections"
export PATH="$venv/bin:$PATH"
export ANSIBLE_COLLECTIONS_PATH="$collections"
export ANSIBLE_NOCOLOR=1 PY_COLORS=0 ANSIBLE_FORCE_COLOR=0
export PIP_DISABLE_PIP_VERSION_CHECK=1

log() { printf '[%s %s] %s\n' "$(basename "$0" .sh)" "$(date +%H:%M:%S)" "$*"; }

# apt_packages [demo]: the demo needs only the simulator's compiler and the venv; the tests need
# the rest (chromium, with a font, renders the fleet report page in its test).
apt_packages() {
  local wanted=(gcc make libc6-dev python3-venv)
  [ "${1:-}" = demo ] || wanted+=(git rsync lsof psmisc util-linux shellcheck chromium
    fonts-liberation)
  local missing=()
  local p
  for p in "${wanted[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && { log "apt: all present"; return 0; }
  if [ "$(id -u)" -ne 0 ]; then
    log "apt: missing ${missing[*]} and not root: install them first"; return 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# python_venv [demo]: the demo installs what it runs (tests/requirements-demo.txt and the image's
# package); the tests install tests/requirements.txt, which includes the demo's.
python_venv() {
  local requirements=tests/requirements.txt check="ansible, grpc, kubernetes, hypothesis, galaxy_importer"
  if [ "${1:-}" = demo ]; then
    requirements=tests/requirements-demo.txt check="ansible, grpc"
  fi
  if [ ! -x "$py" ]; then
    python3 -m venv "$venv" || return 1
  fi
  "$py" -m pip install -q --upgrade pip >/dev/null || return 1
  # The mirror's pip.conf names optional local indexes; their "is ignored" warnings are noise.
  "$py" -m pip install -q -r "$requirements" -e ./plugin_image >"$venv/pip.log" 2>&1
  local rc=$?
  grep -v "is ignored: it is neither a file nor a directory" "$venv/pip.log"
  [ $rc -eq 0 ] || return $rc
  "$py" -c "import $check" || return 1
  mkdir -p "$collections/ansible_collections/hygon"
  ln -sfn "$repo" "$collections/ansible_collections/hygon/dcu"
  [ "${1:-}" = demo ] && return 0
  "$py" tests/tools/ansible_test_offline.py && promtool_binary
}

# promtool_binary: Prometheus' checker of metric pages and rule files, for the tests. Only the
# binary is taken out of Debian's prometheus package (the server and its service are not
# installed) and kept in the venv.
promtool_binary() {
  [ -x "$venv/bin/promtool" ] && return 0
  local work rc
  work=$(mktemp -d) || return 1
  (cd "$work" && apt-get download -qq prometheus 2>/dev/null) \
    && dpkg-deb --fsys-tarfile "$work"/prometheus_*.deb | tar -x -C "$work" ./usr/bin/promtool \
    && install -m 0755 "$work/usr/bin/promtool" "$venv/bin/promtool"
  rc=$?
  rm -rf "$work"
  [ $rc -eq 0 ] || log "promtool: cannot take it from Debian's prometheus package"
  return $rc
}
