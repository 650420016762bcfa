"""The air-gapped node's side: verify a bundle, check the node, install with dpkg/rpm, register the runtime.

Dependency rule: ``plumbing`` <- ``configure`` <- ``installer`` <- ``mirror``. Runs on the node's own
python3 >= 3.9 from the bundle's zipapp: it imports ``configure`` and ``plumbing``, never ``mirror``
or ``requests``.
"""
