"""Offline checks of the Dockerfile and the Kubernetes manifests (k8s/)."""
