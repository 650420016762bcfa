"""Container-engine configuration for the NVIDIA runtime (containerd, Docker, CRI-O, CDI, RuntimeClass).

Dependency rule: ``plumbing`` <- ``configure`` <- ``installer`` <- ``mirror``. This package imports
only ``plumbing`` of ours and pure-Python libraries: it runs on the node's own python3 >= 3.9 from
the bundle's zipapp.
"""
