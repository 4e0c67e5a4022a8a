"""The ``kubernetes`` actuator: a pool's replicas are the ``/scale`` subresource of its scale target.

The target is any object with a scale subresource — a Deployment, StatefulSet, LeaderWorkerSet or a custom resource
— named by the pool's ``scale_target`` (``apiVersion/kind/namespace/name``; by default the Deployment named after
the pool in the actuator's namespace). The dynamic client resolves the kind to its resource by API discovery, reads
the Scale's ``status.replicas`` and merge-patches its ``spec.replicas`` (a custom resource takes no strategic merge).
A target that an HPA or a KEDA ScaledObject already scales is never patched (:mod:`scale_owners`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import ResourceNotFoundError, ResourceNotUniqueError
from kubernetes.dynamic.resource import Resource

from autoscaler.actuators.base import ActuationError, ScaledElsewhere
from autoscaler.actuators.kubernetes_client import KubeConfigError
from autoscaler.actuators.kubernetes_client import api_client as kubernetes_api_client
from autoscaler.actuators.scale_owners import ScaleOwner, hpa_owners, owner_of, scaled_object_owners
from autoscaler.scaling_events import ReasonCode
from fleet.pools import Pool
from fleet.scale_targets import ScaleTarget
from fleet.view import FleetView

OWNER_CACHE_S = 30.0  # one HPA and one ScaledObject list per namespace every 30 s, not per decision (ticks: 5 s)
REQUEST_TIMEOUT_S = 10.0  # a hung API server must not stall the controller loop
HPA = ("autoscaling/v2", "HorizontalPodAutoscaler")
SCALED_OBJECT = ("keda.sh/v1alpha1", "ScaledObject")
MERGE_PATCH = "application/merge-patch+json"


class _TimedDynamicClient(DynamicClient):
    """The dynamic client with every request, discovery's too, under REQUEST_TIMEOUT_S."""

    def request(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        params.setdefault("_request_timeout", REQUEST_TIMEOUT_S)
        return super().request(method, path, body, **params)


class KubernetesActuator:
    """Scales each pool's scale target; a pool without one is the Deployment named after it (unless mapped) in
    ``namespace``."""

    name = "kubernetes"

    def __init__(
        self,
        api_client: client.ApiClient,
        namespace: str,
        deployments: Mapping[str, str] | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        owner_cache_s: float = OWNER_CACHE_S,
        discovery_cache: str | None = None,
    ) -> None:
        self.namespace = namespace
        self._deployments = dict(deployments or {})
        self._api_client = api_client
        self._discovery_cache = discovery_cache  # a file; None: the client's own, per API server, in the temp dir
        self._dynamic: DynamicClient | None = None  # discovered at the first call, not at construction
        self._clock = clock
        self._owner_cache_s = owner_cache_s
        self._owners: dict[str, tuple[float, list[ScaleOwner]]] = {}  # namespace → (listed at, owners)

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
        try:
            api_client = kubernetes_api_client(in_cluster=in_cluster, kubeconfig=kubeconfig)
        except KubeConfigError as exc:
            raise ActuationError(str(exc)) from exc
        return cls(api_client, namespace, deployments)

    def target(self, pool: Pool) -> ScaleTarget:
        """The object whose scale subresource holds ``pool``'s replicas."""
        if pool.spec.scale_target is not None:
            return ScaleTarget.parse(pool.spec.scale_target)
        return ScaleTarget.default(self.namespace, self._deployments.get(pool.name, pool.name))

    def current_replicas(self, pool: Pool, fleet: FleetView | None = None) -> int | None:
        """The target's current replicas, ready + starting (docs/architecture.md, glossary): its Scale's observed
        ``status.replicas``, every pod it runs that is not terminating. None before its controller has observed it
        (``spec.replicas`` is what was asked, not what runs)."""
        target = self.target(pool)
        scale = self._call(f"read the scale of {target}", self._scale(target).get, **_where(target))
        replicas = (scale.to_dict().get("status") or {}).get("replicas")
        return None if replicas is None else int(replicas)

    def apply(self, pool: Pool, replicas: int, fleet: FleetView | None = None) -> str:
        """Patch the target's ``spec.replicas``, unless an HPA or ScaledObject scales it (ScaledElsewhere). What a
        replica runs (engine, model, GPUs, node selector) is the target's own pod template, not the pool's spec."""
        target = self.target(pool)
        owner = owner_of(target, self._owners_in(target.namespace))
        if owner is not None:
            raise _scaled_elsewhere(pool, target, owner)
        scale = self._scale(target)
        body = {"spec": {"replicas": replicas}}
        self._call(f"patch the scale of {target}", scale.patch, body=body, content_type=MERGE_PATCH, **_where(target))
        return f"{target} scaled to {replicas} replicas"

    def publish(self, pools: Sequence[Pool], fleet: FleetView) -> None:
        """Nothing: the scale targets are the whole answer, the agents on their pods are told no pools."""

    def _scale(self, target: ScaleTarget) -> Any:
        """The target's ``scale`` subresource, found by discovery; an ActuationError when its kind has none."""
        resource = self._resource(target.api_version, target.kind, what=f"scale target {target}")
        if resource is None:
            raise ActuationError(
                f"cannot find {target.kind} in {target.api_version}: the API server serves no such kind "
                f"(check the pool's scale_target {target}, or install its CRD)"
            )
        if "scale" not in resource.subresources:
            raise ActuationError(f"{target.api_version} {target.kind} has no scale subresource (scale_target {target})")
        return resource.subresources["scale"]

    def _resource(self, api_version: str, kind: str, *, what: str) -> Resource | None:
        """The API resource serving ``kind`` in ``api_version`` (discovery, cached by the client); None if none."""
        dynamic = self._client()
        try:
            found: Resource = self._call(f"discover {what}", dynamic.resources.get, api_version=api_version, kind=kind)
        except _NoSuchKind:
            return None
        return found

    def _client(self) -> DynamicClient:
        if self._dynamic is None:
            self._dynamic = self._call(
                "discover the API server's resources",
                _TimedDynamicClient,
                self._api_client,
                cache_file=self._discovery_cache,
            )
        return self._dynamic

    def _owners_in(self, namespace: str) -> list[ScaleOwner]:
        """The HPAs and ScaledObjects of ``namespace``, from lists at most ``owner_cache_s`` old. Without KEDA
        installed (no ScaledObject kind served) there are none of those."""
        now = self._clock()
        cached = self._owners.get(namespace)
        if cached is not None and now - cached[0] < self._owner_cache_s:
            return cached[1]
        owners = hpa_owners(self._list(*HPA, namespace))
        owners += scaled_object_owners(self._list(*SCALED_OBJECT, namespace))
        self._owners[namespace] = (now, owners)
        return owners

    def _list(self, api_version: str, kind: str, namespace: str) -> list[dict[str, Any]]:
        resource = self._resource(api_version, kind, what=f"{kind} objects")
        if resource is None:
            return []
        listed = self._call(f"list the {kind} objects in namespace {namespace}", resource.get, namespace=namespace)
        return list(listed.to_dict().get("items") or [])

    @staticmethod
    def _call(action: str, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``method(*args, **kwargs)``, with the client's errors turned into ActuationError (status and reason, no
        headers); discovery's "no such kind" is _NoSuchKind."""
        try:
            return method(*args, **kwargs)
        except client.ApiException as exc:
            raise ActuationError(f"cannot {action}: {exc.status} {exc.reason}{_status_message(exc.body)}") from exc
        except urllib3.exceptions.HTTPError as exc:
            raise ActuationError(f"cannot {action}: API server unreachable ({type(exc).__name__})") from exc
        except ResourceNotFoundError as exc:
            raise _NoSuchKind(action) from exc
        except ResourceNotUniqueError as exc:
            raise ActuationError(f"cannot {action}: more than one API resource serves that kind") from exc


class _NoSuchKind(Exception):
    """Discovery found no resource for a group, version and kind."""


def _where(target: ScaleTarget) -> dict[str, str]:
    return {"name": target.name, "namespace": target.namespace}


def _scaled_elsewhere(pool: Pool, target: ScaleTarget, owner: ScaleOwner) -> ScaledElsewhere:
    """The refusal to patch an owned target, saying whether fleetpilot still acts (through KEDA) or only advises."""
    if owner.kind != "ScaledObject":
        how = "fleetpilot advises only (delete the HPA to let fleetpilot scale it)"
        return ScaledElsewhere(f"{owner} scales {target}; {how}", owner=str(owner), code=ReasonCode.SCALED_BY_HPA)
    if owner.acts_for(pool.name):
        how = f"fleetpilot acts through it (its trigger is fleetpilot's external scaler for pool {pool.name})"
    else:
        how = f"fleetpilot advises only (no trigger is fleetpilot's external scaler with pool: {pool.name})"
    return ScaledElsewhere(f"KEDA {owner} scales {target}; {how}", owner=str(owner), code=ReasonCode.SCALED_BY_KEDA)


def _status_message(body: str | None) -> str:
    """``": <message>"`` from a Kubernetes Status body (it names the object and the missing permission), else ``""``."""
    try:
        message = json.loads(body or "")["message"]
    except (ValueError, KeyError, TypeError):
        return ""
    return f": {message[:300]}" if isinstance(message, str) and message else ""
