"""Fleet wing: rollout manifests for many nodes (the Kubernetes DaemonSet and its pod program)."""
