"""hygon.dcu device plugin: advertises Hygon DCU partitions to the kubelet and carves one per
container on demand, destroying it when the pod is done."""

__version__ = "0.1.0"
