"""The connected host's side: sync NVIDIA's signed apt/yum channels, build signed bundles, publish, roll out.

Four wings, each a subpackage that owns one job: ``sync`` (upstream -> verified mirror),
``bundle`` (mirror -> signed artifact), ``publish`` (mirror -> served repos) and ``fleet``
(rollout manifests). They stand on the shared rooms (``index``: the verified repo reader and
package indexes; ``disk``: the mirror on disk, its switch, trusted key and snapshots; ``release``:
version order, the ``--version`` selector, the lockfile; ``signing``: the operator's key and the
signed repos made with it) and the shared modules of this root (model, errors, the host's caches
and build time), never on each other: a piece two wings need moves down here. ``cli``, ``groups``
and ``snapshot_cli`` sit on top and join the wings' commands.

Dependency rule: ``plumbing`` <- ``configure`` <- ``installer`` <- ``mirror``
(tests/test_architecture.py checks it).
"""
