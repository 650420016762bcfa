"""``python -m mirror``: the full command line."""

from mirror.cli import console

console()
