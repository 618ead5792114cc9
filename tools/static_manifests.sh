#!/usr/bin/env bash
# Static manifests of the device plugin and its admission webhook, for a site that deploys with
# `kubectl apply` or a GitOps tool instead of the role: the device_plugin role's own render mode
# (the same templates, no second copy), with a webhook certificate the manifests never carry.
#
#   tools/static_manifests.sh cert-manager OUT.yaml [ANSIBLE-PLAYBOOK ARGS...]
#   tools/static_manifests.sh site-secret CA.pem OUT.yaml [ANSIBLE-PLAYBOOK ARGS...]
#
#   cert-manager  the webhook's certificate from a cert-manager Certificate (a self-signed Issuer
#                 of its own, or -e '{"hygon_dcu_device_plugin_cert_manager_issuer": {...}}').
#   site-secret   the site makes the Secret hygon-dcu-admission-tls (kubernetes.io/tls) in the
#                 namespace itself; CA.pem (what signed it) goes into the webhook configuration.
#
# Further arguments go to ansible-playbook, e.g. -e hygon_dcu_kubernetes_version=1.20 (default
# 1.30), -e hygon_dcu_device_plugin_image=REF, -e @site-vars.yml. Output that would hold a
# Secret (the scheduler extender's certificates are always the role's own) is refused and not
# written. Needs ansible-playbook with hygon.dcu installed (or ANSIBLE_COLLECTIONS_PATH set).
# roles/device_plugin/README.md, "Static manifests".
set -euo pipefail

usage() { sed -n '5,6p' "$0" | sed 's/^# *//' >&2; exit 2; }
fail() { printf 'static_manifests: %s\n' "$*" >&2; exit 1; }

[ $# -ge 2 ] || usage
variant=$1
shift
case $variant in
  cert-manager)
    source_vars='{"hygon_dcu_device_plugin_webhook_certificate": "cert_manager"}' ;;
  site-secret)
    [ $# -ge 2 ] || usage
    ca=$1
    shift
    [ -s "$ca" ] || fail "$ca is not a file holding the CA's certificate (PEM)"
    source_vars=$(python3 -c 'import json, sys
print(json.dumps({"hygon_dcu_device_plugin_webhook_certificate": "site_secret",
                  "hygon_dcu_device_plugin_webhook_tls_ca": open(sys.argv[1]).read()}))' "$ca") ;;
  *) usage ;;
esac
out=$1
shift
case $out in *.yaml|*.yml) ;; *) fail "OUT must end in .yaml or .yml (got $out)" ;; esac
command -v ansible-playbook >/dev/null || fail "ansible-playbook is not on PATH"

render=$(mktemp -d "${TMPDIR:-/tmp}/hygon-dcu-static.XXXXXX")
trap 'rm -rf "$render"' EXIT
if ! ansible-playbook hygon.dcu.deploy_device_plugin -i localhost, -c local \
  -e 'ansible_python_interpreter={{ ansible_playbook_python }}' \
  -e "hygon_dcu_device_plugin_render_dir=$render/out" -e "$source_vars" "$@" \
  >"$render/playbook.log" 2>&1; then
  cat "$render/playbook.log" >&2
  fail "the device_plugin role refused to render (its message is above); nothing was written"
fi
manifests="$render/out/manifests.yaml"
[ -s "$manifests" ] || fail "the role rendered nothing (state absent?); nothing was written"
if grep -qE '^kind: Secret$|PRIVATE KEY' "$manifests"; then
  fail "the rendered manifests hold a Secret (the scheduler extender's certificates are the role's own: deploy the extender with the role); nothing was written"
fi
version=$(ansible-galaxy collection list hygon.dcu --format json 2>/dev/null |
  python3 -c 'import json, sys
found = [v["version"] for path in json.load(sys.stdin).values() for n, v in path.items() if n == "hygon.dcu"]
print(found[0] if found else "unknown")')
{
  printf '# hygon.dcu %s: the device plugin and its admission webhook, webhook certificate from %s.\n' \
    "$version" "$variant"
  printf '# Rendered by tools/static_manifests.sh from the device_plugin role; apply with kubectl apply -f.\n'
  cat "$manifests"
} >"$out.tmp"
chmod 0644 "$out.tmp"
mv "$out.tmp" "$out"
printf 'static_manifests: %s (%s objects)\n' "$out" "$(grep -c '^---$' "$manifests")"
