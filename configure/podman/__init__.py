"""Podman: GPUs through CDI or NVIDIA's OCI hook, system-wide and for one rootless user."""
