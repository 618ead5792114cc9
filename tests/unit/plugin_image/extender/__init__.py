"""Tests of the scheduler extender (``hygon-dcu-plugin extender``, docs/dev/extender.md)."""
