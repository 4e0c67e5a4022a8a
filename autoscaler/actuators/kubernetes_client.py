"""The Kubernetes API client the server's rooms share (the kubernetes actuator, the agents' TokenReview verifier):
in a pod its ServiceAccount, else a kubeconfig as kubectl reads it."""

from __future__ import annotations

import os

from kubernetes import client, config


class KubeConfigError(ValueError):
    """No usable Kubernetes configuration; the message says where it looked and why it failed."""


def api_client(*, in_cluster: bool | None = None, kubeconfig: str | None = None) -> client.ApiClient:
    """In a pod (``KUBERNETES_SERVICE_HOST`` set, or ``in_cluster=True``) the ServiceAccount; else ``kubeconfig``, a
    file path, where None means ``$KUBECONFIG`` or ``~/.kube/config``."""
    if in_cluster is None:
        in_cluster = "KUBERNETES_SERVICE_HOST" in os.environ
    try:
        if in_cluster:
            configuration = client.Configuration()
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            return client.ApiClient(configuration)
        loaded: client.ApiClient = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        return loaded
    except config.ConfigException as exc:
        where = "in-cluster service account" if in_cluster else f"kubeconfig {kubeconfig or '(default)'}"
        raise KubeConfigError(f"cannot configure the Kubernetes client from the {where}: {exc}") from exc
