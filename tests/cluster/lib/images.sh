# shellcheck shell=bash
# Container images without a registry: a debootstrap minbase rootfs (cached) plus the
# simulator's dcu-probe becomes the workload image, in podman's store and as a docker archive
# that `up` imports into the cluster's containerd. The pause (sandbox) image is the same image
# under a second name: one import instead of two of the same rootfs. The built kube-scheduler on
# the same rootfs is the image of the second scheduler the device_plugin role deploys (a site
# brings its own; the tier has no registry).
# Sourced by cluster.sh after common.sh.

PAUSE_IMAGE=localhost/hygon-dcu-pause:test
WORKLOAD_IMAGE=localhost/hygon-dcu-workload:test
SCHEDULER_IMAGE=localhost/hygon-dcu-kube-scheduler:test
IMAGE_CACHE="$CLUSTER_CACHE/images"
# Everything that decides the rootfs: changing it makes a new cache entry.
ROOTFS_RECIPE="debootstrap --variant=minbase $DEBIAN_SUITE"

podman_cmd() {
    CONTAINERS_CONF="${CONTAINERS_CONF:-$REPO_DIR/plugin_image/containers.conf}" podman "$@"
}

# Prints the path of the cached rootfs tarball, making it when absent.
rootfs_tarball() {
    local key tarball tmp mirror
    key="$(printf '%s\n' "$ROOTFS_RECIPE" | sha256sum | cut -c1-12)"
    tarball="$IMAGE_CACHE/rootfs-$DEBIAN_SUITE-$key.tar"
    if [[ ! -f "$tarball" ]]; then
        mirror="$(debian_mirror)"
        tmp="$(mktemp -d "$IMAGE_CACHE/rootfs.XXXXXX")"
        log "debootstrap --variant=minbase $DEBIAN_SUITE from $mirror"
        # shellcheck disable=SC2086  # the recipe is a word list
        if ! $ROOTFS_RECIPE "$tmp/root" "$mirror" >"$tmp/debootstrap.log" 2>&1; then
            tail -n 20 "$tmp/debootstrap.log" >&2
            rm -rf "${tmp:?}"
            die "debootstrap failed"
        fi
        rm -rf "$tmp"/root/var/lib/apt/lists/* "$tmp"/root/var/cache/apt/*.bin \
            "$tmp"/root/var/cache/apt/archives/*.deb
        tar --numeric-owner -C "$tmp/root" -cf "$tmp/rootfs.tar" .
        mv "$tmp/rootfs.tar" "$tarball"
        rm -rf "${tmp:?}"
    fi
    printf '%s\n' "$tarball"
}

# image_archive NAME ROOTFS_TAR [EXTRA_DIR]: podman image NAME from ROOTFS_TAR (plus the files of
# EXTRA_DIR on top), saved as a docker archive under the cache; prints the archive path.
# The archive's name carries the hash of its inputs, so a new dcu-probe makes a new archive.
image_archive() {
    local name="$1" rootfs="$2" extra="${3:-}" key archive tmp
    key="$(
        {
            printf '%s\n' "$name" "$rootfs"
            if [[ -n "$extra" ]]; then
                (cd "$extra" && find . -type f -print0 | sort -z | xargs -0 sha256sum)
            fi
        } | sha256sum | cut -c1-12
    )"
    archive="$IMAGE_CACHE/${name//[\/:]/_}-$key.docker.tar"
    if [[ ! -f "$archive" ]]; then
        tmp="$(mktemp -d "$IMAGE_CACHE/image.XXXXXX")"
        cp "$rootfs" "$tmp/rootfs.tar"
        if [[ -n "$extra" ]]; then
            # Files only: the rootfs has the directories, and a layer must not repeat a path.
            (cd "$extra" && find . -type f -print0 | sort -z) |
                tar --numeric-owner --owner=0 --group=0 -C "$extra" --null -T - -rf "$tmp/rootfs.tar"
        fi
        podman_cmd import --change 'CMD ["/bin/sleep","infinity"]' "$tmp/rootfs.tar" "$name" \
            >/dev/null 2>"$tmp/podman.log" || { cat "$tmp/podman.log" >&2; die "podman import $name failed"; }
        podman_cmd save --format docker-archive -o "$tmp/image.tar" "$name" \
            >/dev/null 2>"$tmp/podman.log" || { cat "$tmp/podman.log" >&2; die "podman save $name failed"; }
        mv "$tmp/image.tar" "$archive"
        rm -rf "${tmp:?}"
    elif ! podman_cmd image exists "$name"; then
        podman_cmd load -i "$archive" >/dev/null
    fi
    printf '%s\n' "$archive"
}

# Sets WORKLOAD_ARCHIVE and SCHEDULER_ARCHIVE.
prepare_images() {
    mkdir -p "$IMAGE_CACHE"
    make -s -C "$REPO_DIR/tests/simulator" >/dev/null
    local rootfs extra
    rootfs="$(rootfs_tarball)"
    extra="$IMAGE_CACHE/workload-files"
    rm -rf "$extra"
    mkdir -p "$extra/usr/local/bin"
    install -m 0755 "$REPO_DIR/tests/simulator/build/dcu-probe" "$extra/usr/local/bin/dcu-probe"
    # shellcheck disable=SC2034  # read by lib/up.sh
    WORKLOAD_ARCHIVE="$(image_archive "$WORKLOAD_IMAGE" "$rootfs" "$extra")"
    rm -rf "$extra"
    extra="$IMAGE_CACHE/scheduler-files"
    rm -rf "$extra"
    mkdir -p "$extra/usr/local/bin"
    install -m 0755 "$BUILD_BIN/kube-scheduler" "$extra/usr/local/bin/kube-scheduler"
    # shellcheck disable=SC2034  # read by lib/up.sh
    SCHEDULER_ARCHIVE="$(image_archive "$SCHEDULER_IMAGE" "$rootfs" "$extra")"
    rm -rf "$extra"
    podman_cmd tag "$WORKLOAD_IMAGE" "$PAUSE_IMAGE"
}
