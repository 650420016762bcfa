"""LXC, LXD and Incus: LXC's NVIDIA mount hook per container, and the LXD/Incus GPU profile."""
