"""The ``kubernetes`` actuator: a pool's replicas are the scale subresource of its Deployment.

It reads and patches ``apps/v1`` Deployment scale through the official client, and refuses to act on a Deployment
that a HorizontalPodAutoscaler already scales: two controllers writing one ``spec.replicas`` undo each other.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import urllib3
from kubernetes import client, config

from autoscaler.actuators.base import ActuationError
from fleet.pools import Pool
from fleet.view import FleetView

HPA_CACHE_S = 30.0  # one HPA list per namespace every 30 s, not one per decision (the controller ticks every 5 s)
REQUEST_TIMEOUT_S = 10.0  # a hung API server must not stall the controller loop


class KubernetesActuator:
    """Scales the Deployment of each pool in one namespace; the Deployment is named after the pool unless mapped."""

    name = "kubernetes"

    def __init__(
        self,
        api_client: client.ApiClient,
        namespace: str,
        deployments: Mapping[str, str] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        hpa_cache_s: float = HPA_CACHE_S,
    ) -> None:
        self.namespace = namespace
        self._deployments = dict(deployments or {})
        self._apps = client.AppsV1Api(api_client)
        self._autoscaling = client.AutoscalingV2Api(api_client)
        self._clock = clock
        self._hpa_cache_s = hpa_cache_s
        self._hpa_targets: dict[str, list[str]] = {}
        self._hpas_listed_at: float | None = None

    @classmethod
    def from_config(
        cls,
        namespace: str,
        deployments: Mapping[str, str] | None = None,
        in_cluster: bool | None = None,
        *,
        kubeconfig: str | None = None,
    ) -> KubernetesActuator:
        """In a pod (``KUBERNETES_SERVICE_HOST`` set, or ``in_cluster=True``) the service account; else kubeconfig.

        ``kubeconfig`` is a file path; None means ``$KUBECONFIG`` or ``~/.kube/config`` as kubectl reads it. A missing
        or broken configuration is an ActuationError, so the server stops at start with the reason.
        """
        if in_cluster is None:
            in_cluster = "KUBERNETES_SERVICE_HOST" in os.environ
        try:
            if in_cluster:
                configuration = client.Configuration()
                config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
                api_client = client.ApiClient(configuration)
            else:
                api_client = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        except config.ConfigException as exc:
            where = "in-cluster service account" if in_cluster else f"kubeconfig {kubeconfig or '(default)'}"
            raise ActuationError(f"cannot configure the Kubernetes client from the {where}: {exc}") from exc
        return cls(api_client, namespace, deployments)

    def deployment(self, pool: str) -> str:
        """The Deployment that runs ``pool``."""
        return self._deployments.get(pool, pool)

    def current_replicas(self, pool: str, fleet: FleetView | None = None) -> int | None:
        """The Deployment's current replicas, ready + starting (docs/architecture.md, glossary): its observed
        ``status.replicas``, every pod it runs that is not terminating, ready or not yet. None before the
        Deployment controller has observed it (``spec.replicas`` is what was asked, not what runs)."""
        name = self.deployment(pool)
        scale = self._call(
            f"read the scale of deployment {self.namespace}/{name}",
            self._apps.read_namespaced_deployment_scale,
            name,
            self.namespace,
        )
        if scale.status is not None and scale.status.replicas is not None:
            return int(scale.status.replicas)
        return None

    def apply(self, pool: Pool, replicas: int, fleet: FleetView | None = None) -> str:
        """Patch the Deployment's ``spec.replicas``, unless an HPA scales the same Deployment. What a replica runs
        (engine, model, GPUs, node selector) is the Deployment's own pod template, not the pool's spec."""
        name = self.deployment(pool.name)
        hpas = self._hpas_targeting(name)
        if hpas:
            raise ActuationError(
                f"deployment {self.namespace}/{name} is scaled by HorizontalPodAutoscaler {', '.join(hpas)}; "
                "refusing to fight it (delete the HPA or let it scale this pool)"
            )
        self._call(
            f"patch the scale of deployment {self.namespace}/{name}",
            self._apps.patch_namespaced_deployment_scale,
            name,
            self.namespace,
            {"spec": {"replicas": replicas}},
        )
        return f"deployment {self.namespace}/{name} scaled to {replicas} replicas"

    def publish(self, pools: Sequence[Pool], fleet: FleetView) -> None:
        """Nothing: the Deployments are the whole answer, the agents on their pods are told no pools."""

    def _hpas_targeting(self, deployment: str) -> list[str]:
        """Names of the HPAs whose scale target is ``deployment``, from a list at most ``hpa_cache_s`` old."""
        now = self._clock()
        if self._hpas_listed_at is None or now - self._hpas_listed_at >= self._hpa_cache_s:
            hpa_list = self._call(
                f"list the horizontal pod autoscalers in namespace {self.namespace}",
                self._autoscaling.list_namespaced_horizontal_pod_autoscaler,
                self.namespace,
            )
            targets: dict[str, list[str]] = {}
            for hpa in hpa_list.items:
                ref = hpa.spec.scale_target_ref
                if ref.kind == "Deployment":
                    targets.setdefault(ref.name, []).append(hpa.metadata.name)
            self._hpa_targets, self._hpas_listed_at = targets, now
        return self._hpa_targets.get(deployment, [])

    @staticmethod
    def _call(action: str, method: Callable[..., Any], *args: Any) -> Any:
        """``method(*args)``, with the client's errors turned into ActuationError (status and reason, no headers)."""
        try:
            return method(*args, _request_timeout=REQUEST_TIMEOUT_S)
        except client.ApiException as exc:
            raise ActuationError(f"cannot {action}: {exc.status} {exc.reason}{_status_message(exc.body)}") from exc
        except urllib3.exceptions.HTTPError as exc:
            raise ActuationError(f"cannot {action}: API server unreachable ({type(exc).__name__})") from exc


def _status_message(body: str | None) -> str:
    """``": <message>"`` from a Kubernetes Status body (it names the object and the missing permission), else ``""``."""
    try:
        message = json.loads(body or "")["message"]
    except (ValueError, KeyError, TypeError):
        return ""
    return f": {message[:300]}" if isinstance(message, str) and message else ""
