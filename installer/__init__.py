"""The air-gapped node's side: verify a bundle, check the node, install with dpkg/rpm, register the runtime.

Runs on the node's own python3 >= 3.9 from the bundle's zipapp: it imports ``configure`` but never
``mirror`` or ``requests``.
"""
