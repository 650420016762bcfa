"""Sync wing: upstream -> verified mirror (download, resolve, status, verify, prune, and their CLI)."""
