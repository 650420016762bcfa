"""Publish wing: mirror -> a served tree nodes' own apt and dnf trust (NVIDIA's layout, signed)."""
