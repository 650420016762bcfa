"""The mirror on disk: its layout, lock and state file (:mod:`~mirror.disk.store`), the journaled switch that
puts a sync's staged files in place all at once (:mod:`~mirror.disk.switch`), and the upstream key the mirror
recorded and trusts (:mod:`~mirror.disk.trust`). Shared by the wings, below them.
"""
