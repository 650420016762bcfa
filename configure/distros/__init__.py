"""Kubernetes distributions' containerd: detection, k3s/RKE2, MicroK8s/k0s, the GPU Operator check."""
