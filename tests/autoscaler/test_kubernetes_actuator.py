"""The kubernetes actuator on Deployments through the real client against the in-repo fake API server (its
default target, the HPA on it, errors, configuration); one test on a real cluster."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from autoscaler.actuators.base import ActuationError, Actuator, ScaledElsewhere
from autoscaler.actuators.kubernetes import KubernetesActuator
from autoscaler.scaling_events import ReasonCode
from fleet.pools import Pool, PoolSpec
from fleet.view import FleetView
from tests.support.clock import FakeClock
from tests.support.fake_kube import FakeKube

NS = "inference"
RBAC = Path(__file__).parents[2] / "deploy" / "kubernetes" / "rbac.yaml"
NO_FLEET = FleetView(0.0, {}, frozenset(), (), (), {})
LLAMA = "apps/v1/Deployment/inference/llama-8b"


def pool(name: str, scale_target: str | None = None) -> Pool:
    """A pool as the controller hands it over; without a scale target the Deployment is found by its name alone."""
    return Pool(name, PoolSpec(scale_target=scale_target), None, 1, 0.0, 0.0)


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube() as kube:
        kube.add_deployment(NS, "llama-8b", 2)
        yield kube


@pytest.fixture
def actuator(kube: FakeKube, clock: FakeClock, tmp_path: Path) -> KubernetesActuator:
    return KubernetesActuator(kube.api_client(), NS, clock=clock, discovery_cache=str(tmp_path / "discovery.json"))


def hpa_lists(kube: FakeKube) -> int:
    return sum(request.path.endswith("/horizontalpodautoscalers") for request in kube.sent("GET"))


def test_apply_patches_the_scale_and_current_reads_it_back(kube: FakeKube, actuator: KubernetesActuator) -> None:
    as_protocol: Actuator = actuator
    assert as_protocol.current_replicas(pool("llama-8b"), NO_FLEET) == 2
    note = as_protocol.apply(pool("llama-8b"), 5, NO_FLEET)  # the tick's fleet view means nothing to a Deployment
    assert note == f"{LLAMA} scaled to 5 replicas"
    assert kube.deployments[(NS, "llama-8b")].spec_replicas == 5
    assert actuator.current_replicas(pool("llama-8b")) == 5
    (patch,) = kube.sent("PATCH")
    assert patch.path == f"/apis/apps/v1/namespaces/{NS}/deployments/llama-8b/scale"
    assert json.loads(patch.body) == {"spec": {"replicas": 5}}
    assert patch.headers["content-type"] == "application/merge-patch+json"  # a custom resource takes no other


def test_a_mapping_names_the_deployment_of_a_pool(kube: FakeKube, clock: FakeClock) -> None:
    kube.add_deployment(NS, "vllm-llama", 1)
    actuator = KubernetesActuator(kube.api_client(), NS, {"llama-8b": "vllm-llama"}, clock=clock)
    assert actuator.target(pool("llama-8b")).name == "vllm-llama"
    actuator.apply(pool("llama-8b"), 3)
    assert kube.deployments[(NS, "vllm-llama")].spec_replicas == 3
    assert kube.deployments[(NS, "llama-8b")].spec_replicas == 2


def test_current_is_the_pods_that_run_and_unknown_before_the_first_observation(
    kube: FakeKube, actuator: KubernetesActuator
) -> None:
    # current = ready + starting: every pod not terminating, as status.replicas counts them, not what spec asks
    kube.deployments[(NS, "llama-8b")].status_replicas = 3  # spec says 2, three pods still run (a scale-down)
    assert actuator.current_replicas(pool("llama-8b")) == 3
    kube.add_deployment(NS, "fresh", 4, observed=False)
    assert actuator.current_replicas(pool("fresh")) is None  # spec's 4 were asked for; none is known to run yet


def test_publish_tells_the_nodes_nothing(kube: FakeKube, actuator: KubernetesActuator) -> None:
    actuator.publish([], NO_FLEET)
    assert kube.requests == []  # not even discovery: the dynamic client is made at the first call


def test_an_hpa_on_the_same_deployment_is_left_to_scale_it_and_no_patch_is_sent(
    kube: FakeKube, actuator: KubernetesActuator
) -> None:
    kube.add_hpa(NS, "llama-hpa", "llama-8b")
    with pytest.raises(ScaledElsewhere) as caught:
        actuator.apply(pool("llama-8b"), 5)
    assert caught.value.code is ReasonCode.SCALED_BY_HPA
    assert caught.value.owner == f"HorizontalPodAutoscaler {NS}/llama-hpa"
    assert str(caught.value) == (
        f"HorizontalPodAutoscaler {NS}/llama-hpa scales {LLAMA}; "
        "fleetpilot advises only (delete the HPA to let fleetpilot scale it)"
    )
    assert kube.sent("PATCH") == []
    assert kube.deployments[(NS, "llama-8b")].spec_replicas == 2


@pytest.mark.parametrize(
    ("namespace", "target", "kind", "api_version"),
    [
        (NS, "other-deployment", "Deployment", "apps/v1"),
        (NS, "llama-8b", "StatefulSet", "apps/v1"),
        ("elsewhere", "llama-8b", "Deployment", "apps/v1"),
        (NS, "llama-8b", "Deployment", "example.com/v1"),
    ],
    ids=["other-deployment", "same-name-other-kind", "other-namespace", "same-kind-other-group"],
)
def test_an_hpa_on_another_target_is_fine(
    kube: FakeKube, actuator: KubernetesActuator, namespace: str, target: str, kind: str, api_version: str
) -> None:
    kube.add_hpa(namespace, "some-hpa", target, kind=kind, api_version=api_version)
    actuator.apply(pool("llama-8b"), 4)
    assert kube.deployments[(NS, "llama-8b")].spec_replicas == 4


def test_the_hpa_list_is_cached_for_30_seconds(kube: FakeKube, actuator: KubernetesActuator, clock: FakeClock) -> None:
    actuator.apply(pool("llama-8b"), 3)
    kube.add_hpa(NS, "late-hpa", "llama-8b")
    clock.advance(29)
    actuator.apply(pool("llama-8b"), 4)  # the cached list predates the HPA
    assert hpa_lists(kube) == 1
    clock.advance(1)
    with pytest.raises(ScaledElsewhere, match="late-hpa"):
        actuator.apply(pool("llama-8b"), 5)
    assert hpa_lists(kube) == 2


def test_an_unknown_deployment_is_an_actuation_error_with_404(actuator: KubernetesActuator) -> None:
    with pytest.raises(ActuationError, match=r'404 Not Found: deployments.apps "missing" not found'):
        actuator.current_replicas(pool("missing"))
    with pytest.raises(ActuationError, match="patch the scale of apps/v1/Deployment/inference/missing: 404"):
        actuator.apply(pool("missing"), 1)


@pytest.mark.parametrize(
    ("verb", "call", "resource"),
    [("get", "current", "deployments/scale"), ("patch", "apply", "deployments/scale"), ("list", "apply", "horizont")],
)
def test_rbac_refusal_is_an_actuation_error_with_403(
    kube: FakeKube, actuator: KubernetesActuator, verb: str, call: str, resource: str
) -> None:
    kube.forbidden = {verb}
    with pytest.raises(ActuationError, match=f'403 Forbidden: .* cannot {verb} resource "{resource}') as caught:
        actuator.current_replicas(pool("llama-8b")) if call == "current" else actuator.apply(pool("llama-8b"), 3)
    assert kube.deployments[(NS, "llama-8b")].spec_replicas == 2
    assert kube.token not in str(caught.value)


def test_requests_carry_the_bearer_token_and_errors_never_show_it(kube: FakeKube, actuator: KubernetesActuator) -> None:
    actuator.current_replicas(pool("llama-8b"))
    with pytest.raises(ActuationError) as caught:
        actuator.current_replicas(pool("missing"))
    assert {request.headers["authorization"] for request in kube.requests} == {f"Bearer {kube.token}"}
    assert kube.token not in str(caught.value)


def test_an_unreachable_api_server_is_an_actuation_error(clock: FakeClock) -> None:
    with FakeKube() as kube:
        api_client = kube.api_client()
    actuator = KubernetesActuator(api_client, NS, clock=clock)
    with pytest.raises(ActuationError, match="API server unreachable"):
        actuator.current_replicas(pool("llama-8b"))


def test_from_config_reads_a_kubeconfig_and_names_a_missing_one(kube: FakeKube, tmp_path: Path) -> None:
    kubeconfig = kube.write_kubeconfig(tmp_path / "kubeconfig")
    actuator = KubernetesActuator.from_config(NS, {"chat": "llama-8b"}, in_cluster=False, kubeconfig=str(kubeconfig))
    assert actuator.current_replicas(pool("chat")) == 2
    with pytest.raises(ActuationError, match=r"kubeconfig .*missing"):
        KubernetesActuator.from_config(NS, None, in_cluster=False, kubeconfig=str(tmp_path / "missing"))


def test_in_cluster_config_outside_a_pod_is_an_actuation_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ActuationError, match="in-cluster service account"):
        KubernetesActuator.from_config(NS, None, in_cluster=True)


def test_the_rbac_manifest_grants_what_the_actuator_calls() -> None:
    """To the server's ServiceAccount, for a pool's default target (a Deployment, the HPAs beside it), whichever Role
    or ClusterRole of the file grants it (one built into Kubernetes, bound by name, counts for nothing here)."""
    yaml = pytest.importorskip("yaml")
    loaded = list(yaml.safe_load_all(RBAC.read_text()))
    roles = {(doc["kind"], doc["metadata"]["name"]): doc for doc in loaded if doc["kind"] in {"Role", "ClusterRole"}}
    bindings = [doc for doc in loaded if doc["kind"] in {"RoleBinding", "ClusterRoleBinding"}]
    granted = {
        (group, resource, verb)
        for binding in bindings
        if any(subject["name"] == "fleetpilot" for subject in binding["subjects"])
        for rule in roles.get((binding["roleRef"]["kind"], binding["roleRef"]["name"]), {"rules": []})["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    needed = {
        ("apps", "deployments/scale", "get"),
        ("apps", "deployments/scale", "patch"),
        ("autoscaling", "horizontalpodautoscalers", "list"),
    }
    assert needed <= granted


@pytest.mark.kubernetes
def test_scales_a_deployment_on_a_real_cluster() -> None:
    """Creates a pause Deployment at 0 replicas in $FLEETPILOT_TEST_KUBERNETES_NAMESPACE, scales it to 1, deletes it."""
    kubeconfig = os.environ.get("FLEETPILOT_TEST_KUBECONFIG")
    if not kubeconfig:
        # A plain skip, even under CI=true: no cluster runs in CI, so this is not something .ci/run must provide.
        pytest.skip("needs a real cluster: set FLEETPILOT_TEST_KUBECONFIG (no cluster in CI; skipped under CI=true)")
    namespace = os.environ.get("FLEETPILOT_TEST_KUBERNETES_NAMESPACE", "default")
    actuator = KubernetesActuator.from_config(namespace, {"probe": "fleetpilot-actuator-test"}, kubeconfig=kubeconfig)
    apps = client.AppsV1Api(config.new_client_from_config(config_file=kubeconfig))  # type: ignore[no-untyped-call]
    apps.create_namespaced_deployment(namespace, _pause_deployment("fleetpilot-actuator-test"))
    try:
        actuator.apply(pool("probe"), 1)
        scale = apps.read_namespaced_deployment_scale("fleetpilot-actuator-test", namespace)
        assert scale.spec is not None and scale.spec.replicas == 1
        deadline = time.monotonic() + 60
        while actuator.current_replicas(pool("probe")) != 1 and time.monotonic() < deadline:
            time.sleep(1)
        assert actuator.current_replicas(pool("probe")) == 1
    finally:
        apps.delete_namespaced_deployment("fleetpilot-actuator-test", namespace)


def _pause_deployment(name: str) -> client.V1Deployment:
    """A Deployment of the pause image at 0 replicas: scaling it to 1 starts one pod that does nothing."""
    labels = {"app": name}
    pod = client.V1PodSpec(containers=[client.V1Container(name="pause", image="registry.k8s.io/pause:3.10")])
    spec = client.V1DeploymentSpec(
        replicas=0,
        selector=client.V1LabelSelector(match_labels=labels),
        template=client.V1PodTemplateSpec(metadata=client.V1ObjectMeta(labels=labels), spec=pod),
    )
    return client.V1Deployment(metadata=client.V1ObjectMeta(name=name, labels=labels), spec=spec)
