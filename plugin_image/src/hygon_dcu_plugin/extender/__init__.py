"""The scheduler extender (``hygon-dcu-plugin extender``): filter, prioritize and bind for
partition pods, from each node's published geometry (docs/dev/extender.md)."""
