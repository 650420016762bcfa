"""Shared pieces of the benchmarks: the loopback nginx, the peer-tool runners and the report."""
