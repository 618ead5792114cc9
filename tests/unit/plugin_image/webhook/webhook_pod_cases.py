"""Pod specs with the verdict the admission webhook must reach, shared by the rule tests, the
HTTPS tests and the matchConditions test.

Each case lists the (rule, container) pairs that must be reported, in any order; an empty list
means the pod is admitted. ``matched`` says whether the ValidatingWebhookConfiguration's
matchConditions must send the pod to the webhook at all (any hygon.com/ resource in a
container or init container, requests or limits).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hygon_dcu_plugin.request import Reason

FAMILY = "hygon.com/dcu.partitioned"
P2G = "hygon.com/dcu.partitioned.mig-2g.15gb"
P4G = "hygon.com/dcu.partitioned.mig-4g.31gb"
WHOLE = "hygon.com/dcu"
SLICED = "hygon.com/dcu.sliced"
MEMORY_MIB = FAMILY + ".memory-mib"
COMPUTE_UNITS = FAMILY + ".compute-units"
PARTITION = {FAMILY: "1", P2G: "1"}
SLICE_MEMORY_MIB = SLICED + ".memory-mib"
SLICE_COMPUTE_UNITS = SLICED + ".compute-units"
SLICE = {SLICED: "1", SLICE_MEMORY_MIB: "16384"}


def container(
    name: str,
    limits: dict[str, Any] | None = None,
    requests: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": name, "image": "registry.example/train:1", **extra}
    resources: dict[str, Any] = {}
    if limits is not None:
        resources["limits"] = limits
    if requests is not None:
        resources["requests"] = requests
    if resources:
        spec["resources"] = resources
    return spec


def pod(
    *containers: dict[str, Any],
    init: tuple[dict[str, Any], ...] = (),
    ephemeral: tuple[dict[str, Any], ...] = (),
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    if ephemeral:
        spec["ephemeralContainers"] = list(ephemeral)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": spec,
    }


def sidecar(name: str, limits: dict[str, Any] | None = None) -> dict[str, Any]:
    return container(name, limits, restartPolicy="Always")


@dataclass(frozen=True)
class Case:
    id: str
    pod: dict[str, Any]
    denied: list[tuple[Reason, str]] = field(default_factory=list)
    matched: bool = True

    @property
    def allowed(self) -> bool:
        return not self.denied


CASES: list[Case] = [
    # --- admitted ---
    Case("no-resources", pod(container("app")), matched=False),
    Case("empty-resources", pod({"name": "app", "image": "x", "resources": {}}), matched=False),
    Case(
        "cpu-memory-only",
        pod(container("app", {"cpu": "2", "memory": "1Gi"}, {"cpu": "1"})),
        matched=False,
    ),
    Case("other-vendor-only", pod(container("app", {"nvidia.com/gpu": "1"})), matched=False),
    Case("limits-only", pod(container("train", PARTITION))),
    Case("requests-equal-limits", pod(container("train", PARTITION, dict(PARTITION)))),
    Case("requests-name-the-family-only", pod(container("train", PARTITION, {FAMILY: "1"}))),
    Case(
        "with-cpu-and-memory",
        pod(
            container(
                "train",
                {**PARTITION, "cpu": "4", "memory": "8Gi"},
                {"cpu": "2", "memory": "8Gi", FAMILY: "1", P2G: "1"},
            )
        ),
    ),
    Case("quantity-1000m-and-1.0", pod(container("train", {FAMILY: "1000m", P2G: "1.0"}))),
    Case("quantity-exponent-and-json-int", pod(container("train", {FAMILY: "1e0", P2G: 1}))),
    Case(
        "two-containers-two-profiles",
        pod(container("a", PARTITION), container("b", {FAMILY: "1", P4G: "1"})),
    ),
    Case("whole-card-only", pod(container("app", {WHOLE: "2"}))),
    Case("slice", pod(container("app", SLICE))),
    Case("slice-with-compute-units", pod(container("app", {**SLICE, SLICE_COMPUTE_UNITS: "20"}))),
    Case(
        "slice-and-whole-card-in-two-containers",
        pod(container("app", SLICE), container("render", {WHOLE: "1"})),
    ),
    Case("two-containers-one-slice-each", pod(container("a", SLICE), container("b", SLICE))),
    Case("unrelated-hygon-resource", pod(container("app", {"hygon.com/nic": "1"}))),
    Case(
        "init-container-without-partition",
        pod(container("train", PARTITION), init=(container("fetch", {"cpu": "1"}),)),
    ),
    Case(
        "sidecar-without-partition",
        pod(container("train", PARTITION), init=(sidecar("log", {"memory": "64Mi"}),)),
    ),
    Case(
        "ephemeral-without-resources",
        pod(container("train", PARTITION), ephemeral=(container("debug"),)),
    ),
    # --- denied ---
    Case(
        "family-without-profile",
        pod(container("train", {FAMILY: "1"})),
        [(Reason.FAMILY_WITHOUT_PROFILE, "train")],
    ),
    Case(
        "profile-without-family",
        pod(container("train", {P2G: "1"})),
        [(Reason.PROFILE_WITHOUT_FAMILY, "train")],
    ),
    Case(
        "family-two",
        pod(container("train", {FAMILY: "2", P2G: "1"})),
        [(Reason.QUANTITY_NOT_ONE, "train")],
    ),
    Case(
        "profile-two",
        pod(container("train", {FAMILY: "1", P2G: "2"})),
        [(Reason.QUANTITY_NOT_ONE, "train")],
    ),
    Case(
        "family-zero",
        pod(container("train", {FAMILY: "0", P2G: "1"})),
        [(Reason.QUANTITY_NOT_ONE, "train")],
    ),
    Case(
        "quantity-1Ki",
        pod(container("train", {FAMILY: "1Ki", P2G: "1"})),
        [(Reason.QUANTITY_NOT_ONE, "train")],
    ),
    Case(
        "two-profiles",
        pod(container("train", {FAMILY: "1", P2G: "1", P4G: "1"})),
        [(Reason.TWO_PROFILES, "train")],
    ),
    Case(
        "requests-only",
        pod(container("train", None, dict(PARTITION))),
        [(Reason.REQUESTS_WITHOUT_LIMITS, "train"), (Reason.REQUESTS_WITHOUT_LIMITS, "train")],
    ),
    Case(
        "requests-disagree-with-limits",
        pod(container("train", PARTITION, {FAMILY: "2", P2G: "1"})),
        [(Reason.REQUESTS_LIMITS_DISAGREE, "train")],
    ),
    Case(
        "quantity-500m",
        pod(container("train", {FAMILY: "500m", P2G: "1"})),
        [(Reason.QUANTITY_NOT_WHOLE, "train")],
    ),
    Case(
        "quantity-1.5",
        pod(container("train", {FAMILY: "1", P2G: "1.5"})),
        [(Reason.QUANTITY_NOT_WHOLE, "train")],
    ),
    Case(
        "quantity-garbage",
        pod(container("train", {FAMILY: "one", P2G: "1"})),
        [(Reason.QUANTITY_NOT_WHOLE, "train")],
    ),
    Case(
        "partition-in-sidecar",
        pod(container("train", PARTITION), init=(sidecar("proxy", dict(PARTITION)),)),
        [(Reason.PARTITION_IN_SIDECAR, "proxy")],
    ),
    Case(
        "partition-in-init-container",
        pod(container("train"), init=(container("warmup", dict(PARTITION)),)),
        [(Reason.PARTITION_IN_INIT_CONTAINER, "warmup")],
    ),
    Case(
        "partition-in-ephemeral-container",
        pod(container("train", PARTITION), ephemeral=(container("debug", dict(PARTITION)),)),
        [(Reason.EPHEMERAL_CONTAINER_RESOURCE, "debug")],
    ),
    Case(
        "whole-card-next-to-partition",
        pod(container("train", PARTITION), container("legacy", {WHOLE: "1"})),
        [(Reason.MIXED_WITH_PARTITIONS, "legacy")],
    ),
    Case(
        "sliced-in-partition-container",
        pod(container("train", {**PARTITION, SLICED: "1"})),
        [(Reason.MIXED_WITH_PARTITIONS, "train")],
    ),
    Case(
        "whole-card-in-init-next-to-partition",
        pod(container("train", PARTITION), init=(container("check", {WHOLE: "1"}),)),
        [(Reason.MIXED_WITH_PARTITIONS, "check")],
    ),
    Case(
        "profile-without-mig-prefix",
        pod(container("train", {FAMILY: "1", FAMILY + ".2g.15gb": "1"})),
        [(Reason.UNKNOWN_PARTITION_RESOURCE, "train"), (Reason.FAMILY_WITHOUT_PROFILE, "train")],
    ),
    Case(
        "empty-profile-name",
        pod(container("train", {FAMILY: "1", FAMILY + ".mig-": "1"})),
        [(Reason.UNKNOWN_PARTITION_RESOURCE, "train"), (Reason.FAMILY_WITHOUT_PROFILE, "train")],
    ),
    Case(
        "size-admitted",
        pod(container("train", {FAMILY: "1", MEMORY_MIB: "16384", COMPUTE_UNITS: "20"})),
        [],
    ),
    Case(
        "size-next-to-a-profile",
        pod(container("train", {**PARTITION, MEMORY_MIB: "16384"})),
        [(Reason.SIZE_WITH_PROFILE, "train")],
    ),
    Case(
        "size-of-zero-mib",
        pod(container("train", {FAMILY: "1", MEMORY_MIB: "0"})),
        [(Reason.SIZE_OUT_OF_RANGE, "train")],
    ),
    Case(
        "compute-units-without-memory",
        pod(container("train", {FAMILY: "1", COMPUTE_UNITS: "20"})),
        [(Reason.COMPUTE_UNITS_WITHOUT_MEMORY, "train")],
    ),
    Case(
        "two-containers-each-wrong",
        pod(container("a", {FAMILY: "1"}), container("b", {P2G: "1"})),
        [(Reason.FAMILY_WITHOUT_PROFILE, "a"), (Reason.PROFILE_WITHOUT_FAMILY, "b")],
    ),
    Case(
        "negative-quantity",
        pod(container("train", {FAMILY: "-1", P2G: "1"})),
        [(Reason.QUANTITY_NOT_ONE, "train")],
    ),
    Case(
        "sliced-without-memory",
        pod(container("app", {SLICED: "1"})),
        [(Reason.SLICE_WITHOUT_MEMORY, "app")],
    ),
    Case(
        "slice-memory-without-the-slice",
        pod(container("app", {SLICE_MEMORY_MIB: "16384"})),
        [(Reason.SLICE_SIZE_WITHOUT_SLICE, "app")],
    ),
    Case(
        "two-slices-in-one-container",
        pod(container("app", {**SLICE, SLICED: "2"})),
        [(Reason.QUANTITY_NOT_ONE, "app")],
    ),
    Case(
        "slice-next-to-a-whole-card",
        pod(container("app", {**SLICE, WHOLE: "1"})),
        [(Reason.SLICE_WITH_WHOLE_CARD, "app")],
    ),
    Case(
        "unknown-slice-resource",
        pod(container("app", {**SLICE, SLICED + ".cores": "20"})),
        [(Reason.UNKNOWN_SLICE_RESOURCE, "app")],
    ),
    Case(
        "slice-of-zero-compute-units",
        pod(container("app", {**SLICE, SLICE_COMPUTE_UNITS: "0"})),
        [(Reason.SIZE_OUT_OF_RANGE, "app")],
    ),
    Case(
        "slice-in-init-container",
        pod(container("app"), init=(container("warmup", SLICE),)),
        [(Reason.SLICE_IN_INIT_CONTAINER, "warmup")],
    ),
    Case(
        "slice-in-sidecar",
        pod(container("app", SLICE), init=(sidecar("log", SLICE),)),
        [(Reason.SLICE_IN_INIT_CONTAINER, "log")],
    ),
    Case(
        "slice-next-to-a-partition-in-another-container",
        pod(container("train", PARTITION), container("app", SLICE)),
        [(Reason.MIXED_WITH_PARTITIONS, "app")],
    ),
    Case(
        "partition-in-requests-of-init-only",
        pod(container("train"), init=(container("warmup", None, {P2G: "1"}),)),
        [(Reason.PARTITION_IN_INIT_CONTAINER, "warmup")],
    ),
]
