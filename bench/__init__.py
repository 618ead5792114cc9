"""Benchmarks: placement quality, allocator cost and the holder scan (see bench/README.md)."""
