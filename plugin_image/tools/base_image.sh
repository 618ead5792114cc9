#!/bin/sh
# Builds a minimal Debian base image locally and imports it into podman's store, for sites
# where no container registry is reachable but a Debian mirror is.
#
#   plugin_image/tools/base_image.sh [IMAGE]          (default: localhost/debian:bookworm)
#
# Environment:
#   DEBIAN_MIRROR     mirror for debootstrap (default: the one apt on this host uses, else
#                     http://deb.debian.org/debian)
#   HYGON_DCU_REBUILD_BASE=1   rebuild even when the image already exists (the cache is the
#                     image in podman's store: its presence means there is nothing to do)
#   CONTAINERS_CONF   defaults to plugin_image/containers.conf (runc, ulimits)
set -eu

image="${1:-localhost/debian:bookworm}"
suite=bookworm
here="$(cd "$(dirname "$0")/.." && pwd)"
: "${CONTAINERS_CONF:=$here/containers.conf}"
export CONTAINERS_CONF

if [ "${HYGON_DCU_REBUILD_BASE:-0}" != 1 ] && podman image exists "$image"; then
    echo "base image $image already present (set HYGON_DCU_REBUILD_BASE=1 to rebuild)" >&2
    exit 0
fi

for tool in debootstrap podman; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        echo "$tool is missing: apt-get install $tool" >&2
        exit 1
    fi
done
if [ "$(id -u)" -ne 0 ]; then
    echo "debootstrap needs root (it creates device nodes and chroots); rerun as root" >&2
    exit 1
fi

if [ -z "${DEBIAN_MIRROR:-}" ]; then
    # Reuse the mirror this host's apt is configured with: on an air-gapped site it is the
    # only one that answers.
    DEBIAN_MIRROR="$(
        { cat /etc/apt/sources.list.d/*.sources 2>/dev/null; } |
            awk '/^URIs:/ && $2 ~ /debian\/?$/ { print $2; exit }'
    )"
    if [ -z "$DEBIAN_MIRROR" ]; then
        DEBIAN_MIRROR="$(
            { cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null; } |
                awk '$1 == "deb" && $2 !~ /^\[/ && $3 == "'"$suite"'" { print $2; exit }'
        )"
    fi
    : "${DEBIAN_MIRROR:=http://deb.debian.org/debian}"
fi

rootfs="$(mktemp -d "${TMPDIR:-/var/tmp}/hygon-dcu-rootfs.XXXXXX")"
trap 'rm -rf "$rootfs"' EXIT INT TERM

echo "debootstrap --variant=minbase $suite from $DEBIAN_MIRROR" >&2
debootstrap --variant=minbase "$suite" "$rootfs" "$DEBIAN_MIRROR" >"$rootfs.log" 2>&1 || {
    tail -n 20 "$rootfs.log" >&2
    rm -f "$rootfs.log"
    exit 1
}
rm -f "$rootfs.log"
# Slim it the way the registry's -slim images are: no manuals, translations or docs (copyright
# files stay), now and for every package installed on top of it later.
cat >"$rootfs/etc/dpkg/dpkg.cfg.d/hygon-dcu-slim" <<'CFG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/lintian/*
CFG
find "$rootfs/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
find "$rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
rm -rf "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/lintian/*
# Package lists and caches are build leftovers; every build runs apt-get update itself.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin \
    "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/log/*.log "$rootfs"/var/log/apt/*

tar --numeric-owner -C "$rootfs" -c . |
    podman import --change 'CMD ["/bin/bash"]' - "$image" >/dev/null
echo "imported $image" >&2
