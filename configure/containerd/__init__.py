"""containerd: the NVIDIA runtime in its CRI plugin, and how it reads a root config plus its imports."""
