"""The kubernetes actuator on any scalable workload in any namespace — StatefulSet, LeaderWorkerSet, a custom
resource, a core ReplicationController — found by discovery through the real client against the fake API server;
the HPA or KEDA ScaledObject that owns a target; and each bad target's error."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autoscaler.actuators.base import ActuationError, ScaledElsewhere
from autoscaler.actuators.kubernetes import KubernetesActuator
from autoscaler.scaling_events import ReasonCode
from fleet.pools import Pool, PoolSpec
from tests.support.clock import FakeClock
from tests.support.fake_kube import LEADER_WORKER_SET, SCALED_OBJECT, FakeKind, FakeKube

SERVING = "serving"
INFERENCE_POOL = FakeKind("serving.example.com", "v1alpha1", "InferencePool", "inferencepools", ("scale",), custom=True)
NO_SCALE = FakeKind("serving.example.com", "v1alpha1", "ModelCache", "modelcaches", ("status",), custom=True)
LWS = "leaderworkerset.x-k8s.io/v1/LeaderWorkerSet/serving/llama-70b"


def pool(name: str, scale_target: str | None = None) -> Pool:
    return Pool(name, PoolSpec(scale_target=scale_target), None, 1, 0.0, 0.0)


def external(pool: str, kind: str = "external") -> dict[str, Any]:
    """A trigger on fleetpilot's external scaler (CONTRACT §13: ScaledObject metadata ``pool: NAME``)."""
    return {"type": kind, "metadata": {"scalerAddress": "fleetpilot.fleetpilot:9090", "pool": pool}}


CPU_TRIGGER = {"type": "cpu", "metricType": "Utilization", "metadata": {"value": "60"}}


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube() as kube:
        kube.kinds += [LEADER_WORKER_SET, INFERENCE_POOL, NO_SCALE]
        yield kube


@pytest.fixture
def actuator(kube: FakeKube, clock: FakeClock, tmp_path: Path) -> KubernetesActuator:
    return KubernetesActuator(kube.api_client(), "default", clock=clock, discovery_cache=str(tmp_path / "discovery"))


@pytest.mark.parametrize(
    ("api_version", "kind", "path"),
    [
        ("apps/v1", "Deployment", "/apis/apps/v1/namespaces/serving/deployments/llama/scale"),
        ("apps/v1", "StatefulSet", "/apis/apps/v1/namespaces/serving/statefulsets/llama/scale"),
        (
            "leaderworkerset.x-k8s.io/v1",
            "LeaderWorkerSet",
            "/apis/leaderworkerset.x-k8s.io/v1/namespaces/serving/leaderworkersets/llama/scale",
        ),
        (
            "serving.example.com/v1alpha1",
            "InferencePool",
            "/apis/serving.example.com/v1alpha1/namespaces/serving/inferencepools/llama/scale",
        ),
        ("v1", "ReplicationController", "/api/v1/namespaces/serving/replicationcontrollers/llama/scale"),
    ],
)
def test_any_kind_with_a_scale_subresource_is_read_and_patched_in_its_namespace(
    kube: FakeKube, actuator: KubernetesActuator, api_version: str, kind: str, path: str
) -> None:
    workload = kube.add_workload(api_version, kind, SERVING, "llama", 2)
    target = f"{api_version}/{kind}/{SERVING}/llama"
    assert actuator.current_replicas(pool("chat", target)) == 2
    assert actuator.apply(pool("chat", target), 6) == f"{target} scaled to 6 replicas"
    assert (workload.spec_replicas, actuator.current_replicas(pool("chat", target))) == (6, 6)
    (patch,) = kube.sent("PATCH")
    assert patch.path == path and json.loads(patch.body) == {"spec": {"replicas": 6}}
    # the HPAs listed are the target's namespace's, not the actuator's default one
    assert any(r.path == f"/apis/autoscaling/v2/namespaces/{SERVING}/horizontalpodautoscalers" for r in kube.requests)


def test_a_kind_without_a_scale_subresource_is_refused_before_any_patch(
    kube: FakeKube, actuator: KubernetesActuator
) -> None:
    target = "serving.example.com/v1alpha1/ModelCache/serving/llama"
    with pytest.raises(ActuationError, match=r"^serving\.example\.com/v1alpha1 ModelCache has no scale subresource"):
        actuator.apply(pool("chat", target), 3)
    with pytest.raises(ActuationError, match="has no scale subresource"):
        actuator.current_replicas(pool("chat", target))
    assert kube.sent("PATCH") == []


@pytest.mark.parametrize(
    "target",
    ["unknown.example.com/v1/Widget/serving/llama", "apps/v1/Widget/serving/llama", "apps/v2/Deployment/serving/x"],
    ids=["unknown-group", "unknown-kind", "unknown-version"],
)
def test_an_unknown_group_version_or_kind_is_named(actuator: KubernetesActuator, target: str) -> None:
    kind, api_version = target.split("/")[-3], "/".join(target.split("/")[:-3])
    with pytest.raises(
        ActuationError, match=f"cannot find {kind} in {api_version}: the API server serves no such kind"
    ):
        actuator.current_replicas(pool("chat", target))


def test_a_missing_object_is_a_404_naming_its_resource(actuator: KubernetesActuator) -> None:
    with pytest.raises(ActuationError) as caught:
        actuator.current_replicas(pool("chat", LWS))
    assert str(caught.value) == (
        f"cannot read the scale of {LWS}: 404 Not Found: "
        'leaderworkersets.leaderworkerset.x-k8s.io "llama-70b" not found'
    )


def test_a_forbidden_namespace_passes_the_api_servers_403_message_through(
    kube: FakeKube, actuator: KubernetesActuator
) -> None:
    kube.add_workload("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", SERVING, "llama-70b", 2)
    kube.forbidden_namespaces = {SERVING}
    message = (
        'leaderworkersets.leaderworkerset.x-k8s.io "llama-70b" is forbidden: User "system:serviceaccount:serving:'
        'fleetpilot" cannot get resource "leaderworkersets/scale" in API group "leaderworkerset.x-k8s.io" in the '
        'namespace "serving"'
    )
    with pytest.raises(ActuationError) as caught:
        actuator.current_replicas(pool("chat", LWS))
    assert str(caught.value) == f"cannot read the scale of {LWS}: 403 Forbidden: {message}"
    with pytest.raises(ActuationError, match=r'403 Forbidden: .* cannot list resource "horizontalpodautoscalers"'):
        actuator.apply(pool("chat", LWS), 3)  # whether something else scales it cannot be told: not patched
    assert kube.sent("PATCH") == []


@pytest.fixture
def keda(kube: FakeKube) -> FakeKube:
    """KEDA installed: its ScaledObject CRD served, and llama-70b a LeaderWorkerSet at 2."""
    kube.kinds.append(SCALED_OBJECT)
    kube.add_workload("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", SERVING, "llama-70b", 2)
    return kube


@pytest.mark.parametrize("trigger", ["external", "external-push"])
def test_a_scaled_object_on_fleetpilots_external_scaler_means_fleetpilot_acts_through_keda(
    keda: FakeKube, actuator: KubernetesActuator, trigger: str
) -> None:
    lws = {"api_version": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet"}
    triggers = [CPU_TRIGGER, external("chat", trigger)]
    keda.add_scaled_object(SERVING, "llama-70b", "llama-70b", triggers=triggers, **lws)
    keda.add_hpa(SERVING, "keda-hpa-llama-70b", "llama-70b", **lws)  # KEDA's own HPA: not a rival
    with pytest.raises(ScaledElsewhere) as caught:
        actuator.apply(pool("chat", LWS), 5)
    assert (caught.value.code, caught.value.owner) == (ReasonCode.SCALED_BY_KEDA, "ScaledObject serving/llama-70b")
    assert str(caught.value) == (
        f"KEDA ScaledObject serving/llama-70b scales {LWS}; fleetpilot acts through it (its trigger is fleetpilot's "
        "external scaler for pool chat)"
    )
    assert keda.sent("PATCH") == []
    assert keda.workloads[("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", SERVING, "llama-70b")].spec_replicas == 2


@pytest.mark.parametrize(
    "triggers", [[CPU_TRIGGER], [external("another-pool")]], ids=["cpu-trigger", "external-for-another-pool"]
)
def test_a_scaled_object_on_other_triggers_means_fleetpilot_advises_only(
    keda: FakeKube, actuator: KubernetesActuator, triggers: list[dict[str, Any]]
) -> None:
    keda.add_deployment(SERVING, "llama", 1)
    keda.add_scaled_object(SERVING, "llama-so", "llama", triggers=triggers)  # KEDA's default: an apps/v1 Deployment
    with pytest.raises(ScaledElsewhere, match="fleetpilot advises only") as caught:
        actuator.apply(pool("chat", "apps/v1/Deployment/serving/llama"), 5)
    assert caught.value.code is ReasonCode.SCALED_BY_KEDA
    assert keda.sent("PATCH") == []


def test_a_scaled_object_on_another_kind_of_the_same_name_owns_nothing_here(
    keda: FakeKube, actuator: KubernetesActuator
) -> None:
    keda.add_scaled_object(SERVING, "so", "llama-70b", triggers=[external("chat")])  # the Deployment llama-70b
    actuator.apply(pool("chat", LWS), 5)
    assert keda.workloads[("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", SERVING, "llama-70b")].spec_replicas == 5


def test_without_keda_installed_no_scaled_object_is_listed(kube: FakeKube, actuator: KubernetesActuator) -> None:
    kube.add_deployment(SERVING, "llama", 1)
    actuator.apply(pool("chat", "apps/v1/Deployment/serving/llama"), 2)
    assert not any(request.path.endswith("/scaledobjects") for request in kube.requests)
    assert kube.deployments[(SERVING, "llama")].spec_replicas == 2


def test_a_refused_scaled_object_list_is_an_actuation_error_and_nothing_is_patched(
    keda: FakeKube, actuator: KubernetesActuator
) -> None:
    keda.forbidden = {"list"}
    with pytest.raises(ActuationError, match="403 Forbidden"):
        actuator.apply(pool("chat", LWS), 5)
    assert keda.sent("PATCH") == []
