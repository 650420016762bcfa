"""Which release a mirror takes: version order as dpkg and rpm define it (:mod:`~mirror.release.versions`),
the ``--version`` selector (:mod:`~mirror.release.selectors`) and ``gpu-airgap.lock``, the exact package
set a sync resolved (:mod:`~mirror.release.lockfile`). Shared by the sync and bundle wings, below them.
"""
