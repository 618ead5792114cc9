#!/bin/sh
# Builds the device-plugin image and prints its size and every package installed in it.
#
#   plugin_image/tools/build_image.sh [--tag IMAGE] [--base IMAGE|local] [--save FILE.tar]
#
#   --tag    image name (default localhost/hygon-dcu-plugin:<galaxy.yml version>)
#   --base   base image; "local" builds localhost/debian:bookworm with tools/base_image.sh
#            first (sites without registry access). Default: docker.io/library/debian:bookworm-slim,
#            or $HYGON_DCU_BASE_IMAGE when set.
#   --save   also write the image as an OCI archive for `ctr -n k8s.io images import`
#            (docs/image.md).
#   --dry-run  print what would be built (tag, base, version, source) and stop.
#
# Works from a checkout and from an installed collection (~/.ansible/collections/...).
#
# PIP_INDEX_URL, when set, is passed to the build (a site's PyPI mirror).
# The build context is a staged copy of exactly what the Containerfile copies from the
# repository (LICENSE, plugin_image/{pyproject.toml,src} and plugins/module_utils), so stray caches and
# the repository's .venv never reach the build. podman is used when present, else buildah.
# CONTAINERS_CONF defaults to plugin_image/containers.conf (runc, ulimits: see that file).
set -eu

here="$(cd "$(dirname "$0")/.." && pwd)"
repo="$(cd "$here/.." && pwd)"
: "${CONTAINERS_CONF:=$here/containers.conf}"
export CONTAINERS_CONF

# A checkout has galaxy.yml; an installed collection (ansible-galaxy collection install) has
# only the MANIFEST.json that the build wrote from it.
if [ -f "$repo/galaxy.yml" ]; then
    version="$(awk '$1 == "version:" { print $2; exit }' "$repo/galaxy.yml")"
    source_url="$(awk '$1 == "repository:" { print $2; exit }' "$repo/galaxy.yml")"
elif [ -f "$repo/MANIFEST.json" ]; then
    version="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["collection_info"]["version"])' "$repo/MANIFEST.json")"
    source_url="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["collection_info"]["repository"] or "")' "$repo/MANIFEST.json")"
else
    echo "$repo has neither galaxy.yml nor MANIFEST.json: run this script from the collection" >&2
    exit 1
fi
tag="localhost/hygon-dcu-plugin:${version:-0.0.0}"
base="${HYGON_DCU_BASE_IMAGE:-docker.io/library/debian:bookworm-slim}"
save=""
dry_run=""
while [ $# -gt 0 ]; do
    case "$1" in
        --tag) tag="$2"; shift 2 ;;
        --base) base="$2"; shift 2 ;;
        --save) save="$2"; shift 2 ;;
        --dry-run) dry_run=1; shift ;;
        -h|--help) sed -n '2,/^set -eu$/{/^set -eu$/d;p}' "$0"; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
done

if [ -n "$dry_run" ]; then
    echo "would build $tag from $base: version ${version:-0.0.0}, source ${source_url:-none}, license Apache-2.0"
    exit 0
fi

if command -v podman >/dev/null 2>&1; then
    builder=podman
elif command -v buildah >/dev/null 2>&1; then
    builder=buildah
else
    echo "neither podman nor buildah is installed: apt-get install podman" >&2
    exit 1
fi

if [ "$base" = local ]; then
    base=localhost/debian:bookworm
    "$here/tools/base_image.sh" "$base"
fi

for required in LICENSE plugin_image/pyproject.toml plugin_image/src plugins/module_utils; do
    if [ ! -e "$repo/$required" ]; then
        echo "$repo/$required is missing: the image needs the runtime package and node layer" >&2
        exit 1
    fi
done

context="$(mktemp -d "${TMPDIR:-/var/tmp}/hygon-dcu-context.XXXXXX")"
trap 'rm -rf "$context"' EXIT INT TERM
tar -C "$repo" -c --exclude=__pycache__ --exclude='*.pyc' --exclude='*.egg-info' \
    LICENSE plugin_image/Containerfile plugin_image/pyproject.toml plugin_image/src plugins/module_utils |
    tar -C "$context" -x

# PyPI through a TLS-inspecting proxy needs the host's CA bundle; it is handed to the one RUN
# that installs packages and never stored in a layer.
ca_bundle=/etc/ssl/certs/ca-certificates.crt
set --
if [ -s "$ca_bundle" ]; then
    set -- --secret "id=host-ca,src=$ca_bundle"
fi
if [ -n "${PIP_INDEX_URL:-}" ]; then
    set -- "$@" --build-arg "PIP_INDEX_URL=$PIP_INDEX_URL"
fi

echo "building $tag from $base with $builder" >&2
"$builder" build \
    --file "$context/plugin_image/Containerfile" \
    --network host \
    --build-arg "BASE_IMAGE=$base" \
    --build-arg "VERSION=${version:-0.0.0}" \
    --build-arg "SOURCE=$source_url" \
    --tag "$tag" \
    "$@" \
    "$context"

size="$("$builder" image inspect --format '{{.Size}}' "$tag")"
echo "image $tag: size $size bytes ($((size / 1048576)) MiB)"

# The package lists come from the image itself, so they are the installed truth.
run_in_image() {
    entrypoint="$1"
    shift
    if [ "$builder" = podman ]; then
        podman run --rm --network none --entrypoint "$entrypoint" "$tag" "$@"
    else
        working="$(buildah from --quiet "$tag")"
        buildah run --network none "$working" -- "$entrypoint" "$@"
        buildah rm "$working" >/dev/null
    fi
}
echo "Debian packages in $tag:"
# shellcheck disable=SC2016  # dpkg-query's own format fields, not shell variables
run_in_image dpkg-query -W -f '  ${Package} ${Version}\n'
echo "Python distributions in $tag:"
run_in_image python3 -c '
import importlib.metadata as m
for name, version in sorted({(d.metadata["Name"], d.version) for d in m.distributions()}):
    print(f"  {name} {version}")
'

if [ -n "$save" ]; then
    # An OCI archive is what both `ctr -n k8s.io images import` and `podman load` read.
    rm -f "$save"
    if [ "$builder" = podman ]; then
        podman save --quiet --format oci-archive --output "$save" "$tag"
    else
        buildah push --quiet "$tag" "oci-archive:$save:$tag"
    fi
    echo "saved $tag to $save"
fi
