# shellcheck shell=bash source-path=SCRIPTDIR/..
# `cluster.sh build`: kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kubectl
# v1.20.2 from Debian bookworm's source package `kubernetes` (the full tree with vendor/), with
# the vendored reflect2/json-iterator swap of vendor-swap.list, built by the tree's Makefile.
# Sourced by cluster.sh after common.sh.

KUBE_SOURCE_PACKAGE=kubernetes
# Only the bookworm package is the full tree; later ones are repacks without the server code.
KUBE_SOURCE_UPSTREAM=1.20.2
VENDOR_SWAP_LIST="$CLUSTER_DIR/vendor-swap.list"
APT_PRIVATE="$CLUSTER_CACHE/apt"

# apt with a private source list, lists and caches: nothing under /etc/apt or /var/lib/apt.
# Downloads go to directories of ours that the _apt user cannot write, hence no sandbox user.
private_apt() {
    local tool="$1"
    shift
    "$tool" -o Dir::Etc::SourceList="$APT_PRIVATE/sources.list" \
        -o Dir::Etc::SourceParts="$APT_PRIVATE/sources.list.d" \
        -o Dir::State::Lists="$APT_PRIVATE/lists" \
        -o Dir::Cache="$APT_PRIVATE/cache" \
        -o APT::Get::List-Cleanup=false \
        -o APT::Sandbox::User=root "$@"
}

private_apt_update() {
    mkdir -p "$APT_PRIVATE/sources.list.d" "$APT_PRIVATE/lists/partial" "$APT_PRIVATE/cache/archives/partial"
    local uri suite comps signed opts list=""
    while read -r uri suite comps signed; do
        [[ "$suite" == "$DEBIAN_SUITE" || "$suite" == "$DEBIAN_SUITE"-* ]] || continue
        opts=""
        [[ "$signed" != - ]] && opts="[signed-by=$signed] "
        list+="deb ${opts}$uri $suite ${comps//,/ }"$'\n'
        list+="deb-src ${opts}$uri $suite ${comps//,/ }"$'\n'
    done < <(apt_mirrors)
    [[ -n "$list" ]] || die "this host's apt has no $DEBIAN_SUITE source to derive a deb-src list from"
    printf '%s' "$list" >"$APT_PRIVATE/sources.list"
    private_apt apt-get update -qq
}

# The newest source version of the package whose upstream part is KUBE_SOURCE_UPSTREAM
# (Debian spells it "1.20.5+really1.20.2-...").
kube_source_version() {
    private_apt apt-cache showsrc "$KUBE_SOURCE_PACKAGE" |
        awk '/^Version:/ { print $2 }' |
        grep -E "^([0-9]+:)?([0-9.]+\+really)?${KUBE_SOURCE_UPSTREAM//./\\.}-" |
        sort -V | tail -n 1
}

# Everything that decides what the binaries contain, hashed into the cache key: the swap list,
# the code applying it, the build command, and the Go toolchain.
build_recipe() {
    cat "$VENDOR_SWAP_LIST"
    declare -f swap_vendored_sources run_kube_make
    printf '%s\n' "$KUBE_VERSION" "${KUBE_COMPONENTS[@]}"
    go version
}

swap_vendored_sources() {
    local tree="$1" debs="$2" dir package version deb unpacked got
    while read -r dir package version; do
        [[ -z "$dir" || "$dir" == \#* ]] && continue
        [[ "$dir" =~ ^[a-z0-9./-]+$ ]] || die "bad directory in vendor-swap.list: $dir"
        deb="$(find "$debs" -maxdepth 1 -name "${package}_*.deb" | sort -V | tail -n 1)"
        [[ -n "$deb" ]] || die "$package was not downloaded"
        got="$(dpkg-deb -f "$deb" Version)"
        [[ "$got" == "$version" || "$got" == "$version"-* || "$got" == "$version"+* ]] ||
            die "$package is $got, the swap needs upstream $version"
        unpacked="$debs/unpacked/$package"
        rm -rf "$unpacked"
        mkdir -p "$unpacked"
        dpkg-deb -x "$deb" "$unpacked"
        [[ -d "$unpacked/usr/share/gocode/src/$dir" ]] || die "$package has no sources for $dir"
        [[ -d "$tree/vendor/$dir" ]] || die "the tree does not vendor $dir"
        # Same package, other release: the old Go and assembly files go (some were removed
        # upstream), the LICENSE stays, the new non-test sources come in.
        find "$tree/vendor/$dir" -maxdepth 1 -type f \( -name '*.go' -o -name '*.s' \) -delete
        find "$unpacked/usr/share/gocode/src/$dir" -maxdepth 1 -type f \( -name '*.go' -o -name '*.s' \) \
            ! -name '*_test.go' -exec cp -t "$tree/vendor/$dir" {} +
        log "vendor/$dir: replaced by $package $got"
    done <"$VENDOR_SWAP_LIST"
}

run_kube_make() {
    local tree="$1" what=() component
    for component in "${KUBE_COMPONENTS[@]}"; do
        what+=("cmd/$component")
    done
    # GOPATH mode (the Makefile links the tree into its own GOPATH under _output/), no module
    # downloads, static binaries. The Makefile's Go cache under _output/ makes a retry fast.
    env -u GOPATH -u GOFLAGS GO111MODULE=off GOPROXY=off CGO_ENABLED=0 \
        make -C "$tree" WHAT="${what[*]}" KUBE_GIT_VERSION="$KUBE_VERSION" KUBE_GIT_TREE_STATE=clean \
        >"$tree.make.log" 2>&1 || {
        tail -n 40 "$tree.make.log" >&2
        die "make failed; full log: $tree.make.log"
    }
}

check_binary_versions() {
    local bin="$1" component out
    for component in "${KUBE_COMPONENTS[@]}"; do
        [[ -x "$bin/$component" ]] || die "$bin/$component is missing"
        if [[ "$component" == kubectl ]]; then
            out="$("$bin/kubectl" version --client --short 2>&1)" || die "$component --version failed: $out"
        else
            out="$("$bin/$component" --version 2>&1)" || die "$component --version failed: $out"
        fi
        [[ "$out" == *"$KUBE_VERSION"* ]] || die "$component reports '$out', not $KUBE_VERSION"
    done
}

fetch_sources() {
    local into="$1" version="$2"
    mkdir -p "$into"
    (cd "$into" && private_apt apt-get source -qq --download-only "$KUBE_SOURCE_PACKAGE=$version" >/dev/null)
    local dir package _version
    while read -r dir package _version; do
        [[ -z "$dir" || "$dir" == \#* ]] && continue
        (cd "$into" && private_apt apt-get download -qq "$package" >/dev/null)
    done <"$VENDOR_SWAP_LIST"
}

unpack_sources() {
    local from="$1" tree="$2" dsc
    dsc="$(find "$from" -maxdepth 1 -name "${KUBE_SOURCE_PACKAGE}_*.dsc" | head -n 1)"
    [[ -n "$dsc" ]] || die "no .dsc in $from"
    rm -rf "$tree"
    # apt checked the files against the signed Release file already.
    dpkg-source --no-check -x "$dsc" "$tree" >/dev/null
    [[ -d "$tree/vendor" && -d "$tree/cmd/kube-apiserver" ]] ||
        die "$dsc is not the full kubernetes tree (no vendor/ or cmd/kube-apiserver)"
}

# Sets BUILD_BIN to the directory holding the checked binaries, building them when needed.
cluster_build() {
    require_root
    step packages ensure_packages
    mkdir -p "$CLUSTER_CACHE"
    exec {build_lock}>"$CLUSTER_CACHE/build.lock"
    flock "$build_lock"
    # Lists once per cache: a cached build is then found without the mirror (remove
    # $CLUSTER_CACHE/apt to look for a newer source version).
    if ! compgen -G "$APT_PRIVATE/lists/*_Sources*" >/dev/null; then
        step apt-lists private_apt_update
    fi
    local version key entry
    version="$(kube_source_version)"
    [[ -n "$version" ]] || die "no $KUBE_SOURCE_PACKAGE source with upstream $KUBE_SOURCE_UPSTREAM in the $DEBIAN_SUITE lists"
    key="$version-$(build_recipe | sha256sum | cut -c1-12)"
    entry="$CLUSTER_CACHE/build/$key"
    BUILD_BIN="$entry/bin"
    if [[ -f "$entry/complete" ]] && (check_binary_versions "$BUILD_BIN"); then
        log "reusing build $entry"
        exec {build_lock}>&-
        return 0
    fi
    log "building $KUBE_VERSION from $KUBE_SOURCE_PACKAGE $version into $entry"
    rm -rf "${entry:?}/bin" "$entry/complete"
    mkdir -p "$entry/debs"
    build_recipe >"$entry/recipe"
    step fetch-sources fetch_sources "$entry/debs" "$version"
    if [[ ! -f "$entry/tree.swapped" ]]; then
        step unpack-sources unpack_sources "$entry/debs" "$entry/tree"
        step swap-vendored swap_vendored_sources "$entry/tree" "$entry/debs"
        touch "$entry/tree.swapped"
    fi
    step make run_kube_make "$entry/tree"
    mkdir -p "$entry/bin.new"
    local component
    for component in "${KUBE_COMPONENTS[@]}"; do
        cp "$entry/tree/_output/local/bin/linux/amd64/$component" "$entry/bin.new/"
    done
    check_binary_versions "$entry/bin.new"
    mv "$entry/bin.new" "$BUILD_BIN"
    touch "$entry/complete"
    log "built $(du -sh "$entry/tree" | cut -f1) of tree at $entry/tree (kept: a rebuild reuses its Go cache)"
    exec {build_lock}>&-
}
