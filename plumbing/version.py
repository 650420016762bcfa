"""The single source of gpu-airgap's version (read by pyproject.toml and ``--version``)."""

VERSION = "0.1.0"
