#!/usr/bin/env bash
# A real single-node Kubernetes v1.20.2 cluster on this machine, for the tests that need a
# kubelet, a scheduler and an apiserver. See tests/cluster/README.md.
#
#   tests/cluster/cluster.sh build | images | up | down | check-clean | load-image TAG | run CMD...
#                            | restart-kubelet | kill-kubelet | start-kubelet | kill-containers
#                            | restart-scheduler [EXTRA_CONFIG]
# shellcheck source-path=SCRIPTDIR
set -Eeuo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=lib/common.sh
source "$here/lib/common.sh"
# shellcheck source=lib/build.sh
source "$here/lib/build.sh"
# shellcheck source=lib/procs.sh
source "$here/lib/procs.sh"
# shellcheck source=lib/images.sh
source "$here/lib/images.sh"
# shellcheck source=lib/pki.sh
source "$here/lib/pki.sh"
# shellcheck source=lib/network.sh
source "$here/lib/network.sh"
# shellcheck source=lib/preflight.sh
source "$here/lib/preflight.sh"
# shellcheck source=lib/up.sh
source "$here/lib/up.sh"
# shellcheck source=lib/down.sh
source "$here/lib/down.sh"
# shellcheck source=lib/node.sh
source "$here/lib/node.sh"

# A command that fails under errexit without a message of ours still gets one line.
FAILED_COMMAND=""
trap 'FAILED_COMMAND="${BASH_SOURCE[0]#"$here/"}:$LINENO: $BASH_COMMAND"' ERR
report_failure() {
    local status=$?
    ((status == 0)) && return 0
    if ((!FAILURE_REPORTED)) && [[ -n "$FAILED_COMMAND" ]]; then
        log "failed (exit $status): $FAILED_COMMAND"
    fi
    if [[ -n "$CURRENT_STEP" ]]; then
        log "step $CURRENT_STEP failed (exit $status)"
    fi
}
trap report_failure EXIT

usage() {
    sed -n '5,6p' "${BASH_SOURCE[0]}" | sed 's/^# *//' >&2
    exit 2
}

# `run CMD...`: up, CMD with the env file's variables (and the built binaries first on PATH),
# then down and check-clean whatever happened. Each stage is a separate cluster.sh process, so
# a failing stage cannot skip the ones after it.
RUN_TEARDOWN_DONE=0
run_teardown() {
    ((RUN_TEARDOWN_DONE)) && return 0
    RUN_TEARDOWN_DONE=1
    "$here/cluster.sh" down || true
    "$here/cluster.sh" check-clean
}

cluster_run() {
    local status=0
    trap 'run_teardown || true; exit 130' INT TERM
    HYGON_DCU_CLUSTER_RUN_OWNER="$$ $(started_at $$)"
    export HYGON_DCU_CLUSTER_RUN_OWNER
    if "$here/cluster.sh" up >/dev/null; then
        (
            set -a
            # shellcheck source=/dev/null  # written by up
            source "$ENV_FILE"
            set +a
            PATH="$HYGON_DCU_CLUSTER_BIN:$PATH"
            exec "$@"
        ) || status=$?
    else
        status=$?
    fi
    local clean=0
    run_teardown || clean=$?
    trap - INT TERM
    ((status == 0)) && status=$clean
    if ((status)); then
        log "run: exit $status"
        FAILURE_REPORTED=1
    fi
    return "$status"
}

main() {
    (($# >= 1)) || usage
    local command="$1"
    shift
    case "$command" in
    build)
        (($# == 0)) || usage
        cluster_build
        printf '%s\n' "$BUILD_BIN"
        ;;
    images)
        (($# == 0)) || usage
        require_root
        # The scheduler's image carries the built kube-scheduler (a cached build is reused).
        cluster_build
        prepare_images
        printf '%s\n' "$WORKLOAD_ARCHIVE"
        ;;
    up)
        (($# == 0)) || usage
        cluster_up
        ;;
    down)
        (($# == 0)) || usage
        cluster_down
        ;;
    check-clean)
        (($# == 0)) || usage
        cluster_check_clean
        ;;
    run)
        (($# >= 1)) || usage
        require_root
        cluster_run "$@"
        ;;
    load-image)
        (($# == 1)) || usage
        require_root
        require_up
        load_image "$1"
        ;;
    restart-kubelet | kill-kubelet | start-kubelet | kill-containers)
        (($# == 0)) || usage
        require_root
        require_up
        case "$command" in
        restart-kubelet) step restart-kubelet restart_kubelet ;;
        kill-kubelet) kill_kubelet ;;
        start-kubelet) step start-kubelet start_kubelet_ready ;;
        kill-containers) kill_containers ;;
        esac
        ;;
    restart-scheduler)
        # The tier's kube-scheduler again, with EXTRA_CONFIG appended to its configuration (as
        # HYGON_DCU_SCHEDULER_CONFIG at `up`), or without any when none is given.
        (($# <= 1)) || usage
        require_root
        require_up
        SCHEDULER_EXTRA_CONFIG="${1:-}"
        step restart-scheduler restart_scheduler
        ;;
    *) usage ;;
    esac
}

main "$@"
