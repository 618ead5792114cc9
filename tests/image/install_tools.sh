#!/bin/sh
# Installs the container tools the image stage needs, only when they are absent.
# Debian packages: podman and buildah build and run the image, runc because crun refuses the
# mixed cgroup layout of our CI hosts, debootstrap to make a base image where no registry is
# reachable (see docs/image.md).
set -eu
missing=""
for tool in podman buildah runc debootstrap; do
    command -v "$tool" >/dev/null 2>&1 || missing="$missing $tool"
done
if [ -z "$missing" ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "missing:$missing; install them (apt-get install$missing) or rerun as root" >&2
    exit 1
fi
echo "installing:$missing" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086  # word splitting of the package list is intended
apt-get install -y -qq --no-install-recommends $missing uidmap fuse-overlayfs >/dev/null
