"""Package indexes: reading upstream's signed apt and yum indexes and checking packages against them.

:mod:`~mirror.index.repo` loads one remote repository through an injected fetcher (verify, then parse with
:mod:`~mirror.index.apt` or :mod:`~mirror.index.rpm`); :mod:`~mirror.index.header` reads a package's own
header and checks it agrees with its index entry; :mod:`~mirror.index.entries` reads the verified entries
back from a mirror. Shared by the sync, bundle and publish wings, below them.
"""
