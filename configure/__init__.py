"""Container-engine configuration for the NVIDIA runtime (containerd, Docker, CRI-O, CDI, RuntimeClass).

This package is the bottom of the dependency chain (``configure`` <- ``installer`` <- ``mirror``)
and runs on the node's own python3 >= 3.9 from the bundle's zipapp, so it imports nothing from
the other two packages and only pure-Python libraries.
"""

from configure.version import VERSION as __version__

__all__ = ["__version__"]
