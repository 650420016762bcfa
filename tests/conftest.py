"""Shared pytest fixtures: the local NVIDIA-like upstream (``upstream_tree``) and its server (``upstream_server``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.upstream import UpstreamServer, UpstreamTree, cached_upstream, stop_agent


@pytest.fixture(scope="session")
def upstream_tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[UpstreamTree]:
    """The default local upstream, built once and cached by inputs (``$GPU_AIRGAP_TEST_CACHE`` or ~/.cache).

    Read-only: tests that tamper with files use ``tests.upstream.copy_upstream(tree, tmp_path / "site")``.
    Set ``GPU_AIRGAP_TEST_CACHE=`` (empty) to build into the session's tmp dir instead.
    """
    cache = os.environ.get("GPU_AIRGAP_TEST_CACHE")
    cache_dir = (
        Path(cache)
        if cache
        else (
            tmp_path_factory.mktemp("upstream-cache")
            if cache == ""
            else Path.home() / ".cache" / "gpu-airgap-tests"
        )
    )
    tree = cached_upstream(cache_dir)
    yield tree
    stop_agent(tree.gnupghome)  # re-signing helpers may have started one


@pytest.fixture(scope="session")
def _upstream_session_server(upstream_tree: UpstreamTree) -> Iterator[UpstreamServer]:
    with UpstreamServer(upstream_tree.root) as server:
        yield server


@pytest.fixture
def upstream_server(_upstream_session_server: UpstreamServer) -> UpstreamServer:
    """A server on 127.0.0.1 serving ``upstream_tree``, with no faults and an empty log for this test."""
    _upstream_session_server.reset()
    return _upstream_session_server


@pytest.fixture(scope="session", autouse=True)
def _node_zipapp_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Zipapps run by tests extract into a session temp dir, not the machine's /var/cache/gpu-airgap."""
    previous = os.environ.get("GPU_AIRGAP_NODE_CACHE")
    os.environ["GPU_AIRGAP_NODE_CACHE"] = str(tmp_path_factory.mktemp("node-zipapp-cache"))
    yield
    if previous is None:
        os.environ.pop("GPU_AIRGAP_NODE_CACHE", None)
    else:
        os.environ["GPU_AIRGAP_NODE_CACHE"] = previous
