"""gpu-airgap's tests and their fixtures (the local upstream lives in :mod:`tests.upstream`)."""
