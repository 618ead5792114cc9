"""Protocol tier: the plugin's gRPC servers against the kubelet emulator over unix sockets."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import simnode
from hygon_dcu_plugin.deviceplugin.podresources import PodResourcesClient
from hygon_dcu_plugin.vocabulary import FAMILY, SLICED, WHOLE_CARD
from kubelet_emulator import KubeletEmulator
from plugin_harness import Harness

P2G = "hygon.com/dcu.partitioned.mig-2g.15gb"
P4G = "hygon.com/dcu.partitioned.mig-4g.31gb"
P8G = "hygon.com/dcu.partitioned.mig-8g.63gb"
# A partition node serves no whole card and no slice.
IDLE = {FAMILY: 32, P2G: 32, P4G: 16, P8G: 8, WHOLE_CARD: 0, SLICED: 0}
LIMITS_2G = {FAMILY: "1", P2G: "1"}


class Stack:
    def __init__(self, sim: simnode.SimNode, state: Path) -> None:
        self.harness = Harness(sim, state)
        settings = self.harness.settings
        self.kubelet = KubeletEmulator(settings.device_plugin_dir, settings.pod_resources_socket)
        self.kubelet.start()
        # The real PodResources client, talking to the emulator.
        self.harness.runtime.lister = PodResourcesClient(settings.pod_resources_socket)
        self.harness.runtime.allocator.lister = self.harness.runtime.lister
        self.harness.runtime.start()
        registered = self.kubelet.wait_for(
            lambda: (
                set(self.kubelet.endpoints) == set(IDLE)
                and all(e.updates for e in self.kubelet.endpoints.values())
            )
        )
        assert registered, self.kubelet.register_requests

    def counts_reach(self, wanted: dict[str, int]) -> bool:
        return bool(self.kubelet.wait_for(lambda: self.kubelet.counts() == wanted))

    def close(self) -> None:
        self.harness.runtime.stop()
        self.kubelet.stop()


@pytest.fixture
def stack(bw_node: simnode.SimNode, short_tmp: Path) -> Iterator[Stack]:
    built = Stack(bw_node, short_tmp)
    yield built
    built.close()


def test_registration_options_and_idle_counts(stack: Stack) -> None:
    requests = {r.resource_name: r for r in stack.kubelet.register_requests}
    assert set(requests) == set(IDLE)
    for resource, request in requests.items():
        assert request.version == "v1beta1"
        assert os.path.exists(os.path.join(stack.kubelet.plugin_dir, request.endpoint)), resource
    endpoint = stack.kubelet.endpoints[FAMILY]
    assert endpoint.options.pre_start_required is False
    assert stack.counts_reach(IDLE), stack.kubelet.counts()
    # The family's pool: 32 tokens, all Healthy.
    assert len(stack.kubelet.devices(FAMILY)) == 32


def test_allocate_through_the_kubelet_updates_counts_and_reclaims(stack: Stack) -> None:
    kube, kubelet = stack.harness.kube, stack.kubelet
    kube.add_pod("team", "train", {"main": LIMITS_2G})
    responses = kubelet.admit("team", "train", "main", {FAMILY: 1, P2G: 1})
    family = responses[FAMILY]
    assert family.envs["DMI_MIG_VISIBLE_DEVICE"].startswith("MIG-")
    assert len(responses[P2G].devices) == 0  # the profile resource allocates nothing
    held = kubelet.assigned(FAMILY)
    assert stack.counts_reach({**IDLE, P4G: 15, P8G: 7}), kubelet.counts()
    # Live tokens stay Healthy.
    assert all(h == "Healthy" for i, h in kubelet.devices(FAMILY) if i in held)
    kube.delete_pod("team", "train")
    kubelet.remove_pod("team", "train")
    assert stack.counts_reach(IDLE), kubelet.counts()
    assert stack.harness.node.instances() == []


def test_free_tokens_are_withheld_as_capacity_shrinks(stack: Stack) -> None:
    kube, kubelet = stack.harness.kube, stack.kubelet
    for i in range(8):
        kube.add_pod("team", f"big{i}", {"main": {FAMILY: "1", P8G: "1"}})
        kubelet.admit("team", f"big{i}", "main", {FAMILY: 1, P8G: 1})
    assert stack.counts_reach({FAMILY: 8, P2G: 0, P4G: 0, P8G: 8, WHOLE_CARD: 0, SLICED: 0})
    held = kubelet.assigned(FAMILY)
    healthy = {i for i, h in kubelet.devices(FAMILY) if h == "Healthy"}
    assert healthy == held
    kube.add_pod("team", "one-more", {"main": LIMITS_2G})
    with pytest.raises(RuntimeError, match="insufficient"):
        kubelet.admit("team", "one-more", "main", {FAMILY: 1, P2G: 1})


def test_refusal_reaches_the_kubelet_with_its_message(stack: Stack) -> None:
    stack.harness.kube.add_pod("team", "noprofile", {"main": {FAMILY: "1"}})
    with pytest.raises(grpc.RpcError) as caught:
        stack.kubelet.admit("team", "noprofile", "main", {FAMILY: 1})
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "add a limit hygon.com/dcu.partitioned.mig-<profile>: 1" in str(caught.value.details())
    assert stack.harness.node.instances() == []


def test_rejected_pod_still_listed_does_not_steal_the_next_allocation(stack: Stack) -> None:
    kube, kubelet = stack.harness.kube, stack.kubelet
    # An older pod the kubelet rejected: still listed with no device, and the API lags
    # (it still reads Pending).
    kube.add_pod("team", "rejected", {"main": {FAMILY: "1", P2G: "1"}}, created=100.0)
    kubelet.add_pod("team", "rejected", ["main"])
    kube.add_pod("team", "fresh", {"main": {FAMILY: "1", P4G: "1"}}, created=200.0)
    kubelet.admit("team", "fresh", "main", {FAMILY: 1, P4G: 1})
    (grant,) = stack.harness.runtime.store.load()
    assert (grant.pod_name, grant.profile) == ("fresh", "4g.31gb")


def test_multi_container_pod_is_served_in_spec_order(stack: Stack) -> None:
    kube, kubelet = stack.harness.kube, stack.kubelet
    kube.add_pod("team", "duo", {"first": {FAMILY: "1", P4G: "1"}, "second": LIMITS_2G})
    kubelet.admit("team", "duo", "first", {FAMILY: 1, P4G: 1}, containers=["first", "second"])
    kubelet.admit("team", "duo", "second", {FAMILY: 1, P2G: 1})
    grants = {r.containers[0]: r.profile for r in stack.harness.runtime.store.load()}
    assert grants == {"first": "4g.31gb", "second": "2g.15gb"}


def test_init_container_device_is_reused_by_the_app_container(stack: Stack) -> None:
    kube, kubelet = stack.harness.kube, stack.kubelet
    kube.add_pod("team", "prep", {"main": LIMITS_2G}, init_containers={"init": LIMITS_2G})
    kubelet.add_pod("team", "prep", ["main"])  # init containers are never listed
    token = kubelet.pick(FAMILY)
    first = kubelet.allocate(FAMILY, token)  # init container
    second = kubelet.allocate(FAMILY, token)  # app container, same device id
    assert first.envs == second.envs
    (grant,) = stack.harness.runtime.store.load()
    assert grant.containers == ("init", "main")
    assert len(stack.harness.node.instances()) == 1


def test_plugin_registers_again_after_a_kubelet_restart(stack: Stack) -> None:
    before = len(stack.kubelet.register_requests)
    stack.kubelet.restart()
    assert stack.kubelet.wait_for(
        lambda: (
            len(stack.kubelet.register_requests) >= before + len(IDLE)
            and set(stack.kubelet.endpoints) == set(IDLE)
        )
    )
    assert stack.counts_reach(IDLE), stack.kubelet.counts()
    # And it still allocates through the new sockets.
    stack.harness.kube.add_pod("team", "after", {"main": LIMITS_2G})
    responses = stack.kubelet.admit("team", "after", "main", {FAMILY: 1, P2G: 1})
    assert responses[FAMILY].envs["DMI_MIG_VISIBLE_DEVICE"].startswith("MIG-")


def test_a_rate_limited_list_is_retried_inside_allocate(stack: Stack) -> None:
    stack.harness.kube.add_pod("team", "burst", {"main": LIMITS_2G})
    stack.kubelet.reject_lists = 3
    responses = stack.kubelet.admit("team", "burst", "main", {FAMILY: 1, P2G: 1})
    assert responses[FAMILY].envs["DMI_MIG_VISIBLE_DEVICE"].startswith("MIG-")
    assert stack.kubelet.reject_lists == 0


def test_a_kubelet_that_keeps_refusing_list_fails_the_allocate_clearly(stack: Stack) -> None:
    stack.harness.kube.add_pod("team", "starved", {"main": LIMITS_2G})
    stack.kubelet.reject_lists = 1000
    with pytest.raises(grpc.RpcError) as caught:
        stack.kubelet.admit("team", "starved", "main", {FAMILY: 1, P2G: 1})
    stack.kubelet.reject_lists = 0
    assert "cannot ask the kubelet which container is being admitted" in str(caught.value.details())
    assert stack.harness.node.instances() == []


def test_thirty_two_concurrent_allocate_rpcs(stack: Stack) -> None:
    kube, kubelet = stack.harness.kube, stack.kubelet
    tokens = kubelet.pick(FAMILY, 32)
    for i in range(32):
        kube.add_pod("team", f"p{i:02d}", {"main": LIMITS_2G})
        kubelet.add_pod("team", f"p{i:02d}", ["main"])
    results: list[object] = []

    def call(token: str) -> None:
        try:
            results.append(kubelet.allocate(FAMILY, [token]))
        except grpc.RpcError as error:
            results.append(error)

    threads = [threading.Thread(target=call, args=(t,)) for t in tokens]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not [r for r in results if isinstance(r, grpc.RpcError)]
    live = stack.harness.node.instances()
    assert len({(i.pci, i.placement.start) for i in live}) == 32
    assert len({r.pod_name for r in stack.harness.runtime.store.load()}) == 32
    kube.add_pod("team", "late", {"main": LIMITS_2G})
    kubelet.add_pod("team", "late", ["main"])
    with pytest.raises(grpc.RpcError) as caught:
        kubelet.allocate(FAMILY, ["partition-999"])
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "free capacity: 0 partitions" in str(caught.value.details())
