"""The device plugin (``hygon-dcu-plugin serve``): advertises Hygon DCU partitions to the kubelet
and carves one per container on demand, destroying it when the pod is done. The one program of
the image that loads the vendor binding (the collection's node layer)."""
