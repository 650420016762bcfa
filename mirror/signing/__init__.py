"""What the operator signs on the connected host: the operator's key, used through the real gpg
(:mod:`~mirror.signing.key`), and the signed apt and yum repositories made for a set of mirror packages
(:mod:`~mirror.signing.repos`). Shared by the bundle and publish wings, below them.
"""
