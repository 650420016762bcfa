"""The connected host's side: sync NVIDIA's signed apt/yum channels and build signed offline bundles."""
