"""Live tests: real container engines start containers through the runtime gpu-airgap registers.

Pieces (each module owns one):

- :mod:`tests.live.cache` — build-once caches under ``~/.cache/gpu-airgap-tests`` (locked, atomic).
- :mod:`tests.live.nodeview` — a private mount namespace in which a scratch node root's ``/usr/bin``,
  ``/etc`` and ``/dev`` lie over the host's, with a fresh ``/run``: daemons started in it read the
  node's configs at their real paths and find NVIDIA's binaries and stand-in GPU device nodes where
  the configs say, and every mount they make vanishes with the namespace.
- :mod:`tests.live.image` — a busybox-static image (umoci + skopeo), never pulled from anywhere.
- :mod:`tests.live.cri` — the CRI ``api.proto`` from Debian's containerd source package, Python stubs
  generated with grpcio-tools, and a small CRI client.
- :mod:`tests.live.nvidia` — NVIDIA's real toolkit binaries (``tests/data/nvidia-from-source``, or
  ``$GPU_AIRGAP_NVIDIA_BUILD``), stand-in device nodes, the runtime's debug log.
- :mod:`tests.live.daemons` — containerd and dockerd on private roots and sockets, podman on private
  storage; stopped by PID, with the cgroups they made removed.
"""
