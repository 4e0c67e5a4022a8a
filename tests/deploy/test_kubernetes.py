"""The Kubernetes manifests of ``deploy/kubernetes/``: every built-in kind validated against the Kubernetes OpenAPI
schemas bundled in ``kubernetes-validate`` (strict: an unknown field fails; offline: no socket may connect), the
ServiceMonitor CRD checked structurally (its schema is not bundled), and the cross-references a schema cannot see:
selectors, Secrets, ServiceAccounts, ports, settings and CLI flags that exist."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import pytest
import yaml

from fleetpilot.cli import build_parser
from fleetpilot.settings import ServerSettings
from inference_agent.settings import AgentSettings

KUBERNETES = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
KUBERNETES_VERSION = "1.30"
# ScaledObject, TriggerAuthentication: tests/deploy/test_keda_scaledobject.py
CRD_KINDS = {"ServiceMonitor", "ScaledObject", "TriggerAuthentication"}
NOT_RESOURCES = {"kustomization.yaml"}
Resource = dict[str, Any]


def documents(path: Path) -> list[Resource]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def manifests() -> dict[str, list[Resource]]:
    return {p.name: documents(p) for p in sorted(KUBERNETES.glob("*.yaml")) if p.name not in NOT_RESOURCES}


def all_resources() -> list[Resource]:
    return [doc for docs in manifests().values() for doc in docs]


def find(kind: str, name: str) -> Resource:
    matches = [r for r in all_resources() if r["kind"] == kind and r["metadata"]["name"] == name]
    assert len(matches) == 1, f"{kind}/{name}: {len(matches)} found"
    return matches[0]


def pod_spec(workload: Resource) -> Resource:
    spec: Resource = workload["spec"]["template"]["spec"]
    return spec


def containers(workload: Resource) -> list[Resource]:
    spec = pod_spec(workload)
    return [*spec.get("initContainers", []), *spec["containers"]]


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Any attempt to open a connection fails the test: the schemas must come from the installed package."""

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("kubernetes-validate tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    yield


BUILT_IN = [
    pytest.param(doc, id=f"{name}:{doc['kind']}/{doc['metadata']['name']}")
    for name, docs in manifests().items()
    for doc in docs
    if doc["kind"] not in CRD_KINDS
]


@pytest.mark.parametrize("resource", BUILT_IN)
def test_every_built_in_resource_validates_strictly_offline(resource: Resource, no_network: None) -> None:
    assert kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True) == KUBERNETES_VERSION


def test_the_validator_rejects_a_wrong_field(no_network: None) -> None:
    """The strict schemas catch what a typo would do (the check above is not vacuous)."""
    broken = find("DaemonSet", "fleetpilot-agent")
    broken = {**broken, "spec": {**broken["spec"], "nodeSelecter": {"a": "b"}}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSION, strict=True)


def test_the_kustomization_lists_every_manifest_but_the_examples() -> None:
    kustomization = documents(KUBERNETES / "kustomization.yaml")[0]
    assert kustomization["kind"] == "Kustomization"
    listed = set(kustomization["resources"])
    assert all((KUBERNETES / name).is_file() for name in listed)
    # not applied: the Secrets' shapes, and a ScaledObject to copy per pool (it needs KEDA's CRDs)
    assert listed == set(manifests()) - {"secrets.example.yaml", "keda-scaledobject.yaml"}
    images = {i["name"] for i in kustomization["images"]}
    used = {c["image"].split(":")[0] for r in all_resources() if "template" in r.get("spec", {}) for c in containers(r)}
    assert used - {"postgres"} == images


def test_the_agent_runs_on_gpu_nodes_with_the_nvidia_runtime_and_the_mps_pipe() -> None:
    agent = find("DaemonSet", "fleetpilot-agent")
    spec = pod_spec(agent)
    assert spec["runtimeClassName"] == "nvidia"
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    (container,) = spec["containers"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert volumes[mounts["/tmp/nvidia-mps"]]["hostPath"]["path"] == "/tmp/nvidia-mps"
    env = {e["name"]: e for e in container["env"]}
    assert env["CUDA_MPS_PIPE_DIRECTORY"]["value"] == "/tmp/nvidia-mps"
    # the spool lives on the host, so a pod restart loses nothing
    config = find("ConfigMap", "fleetpilot-agent")["data"]
    assert volumes[mounts[config["FLEETPILOT_SPOOL_DIR"]]]["hostPath"]["path"] == config["FLEETPILOT_SPOOL_DIR"]


def test_the_agent_joins_with_its_pods_projected_token_for_fleetpilots_audience(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No Secret per node: the agent's token is its pod's ServiceAccount token for the server's audience, which the
    server checks with a TokenReview it may create, for the one ServiceAccount it accepts."""
    agent = find("DaemonSet", "fleetpilot-agent")
    spec = pod_spec(agent)
    (container,) = spec["containers"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    env = {e["name"]: e for e in container["env"]}
    mount = next(
        m for m in container["volumeMounts"] if env["FLEETPILOT_TOKEN_FILE"]["value"].startswith(m["mountPath"])
    )
    assert mount["readOnly"] is True
    (source,) = volumes[mount["name"]]["projected"]["sources"]
    token = source["serviceAccountToken"]
    assert env["FLEETPILOT_TOKEN_FILE"]["value"] == f"{mount['mountPath']}/{token['path']}"
    assert env["FLEETPILOT_NODE_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    server = find("Deployment", "fleetpilot-server")
    for variable in pod_spec(server)["containers"][0]["env"]:
        if variable["name"].startswith("FLEETPILOT_KUBERNETES_") and "value" in variable:
            monkeypatch.setenv(variable["name"], variable["value"])  # read as the server reads its environment
    settings = ServerSettings(database_url="sqlite://")
    assert settings.kubernetes_agent_auth and token["audience"] == settings.kubernetes_token_audience
    account = f"{agent['metadata']['namespace']}/{spec['serviceAccountName']}"
    assert settings.kubernetes_agent_service_accounts == [account]
    review = find("ClusterRole", "fleetpilot-token-review")
    assert review["rules"] == [
        {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]}
    ]
    binding = find("ClusterRoleBinding", "fleetpilot-token-review")
    assert {"kind": "ServiceAccount", "name": pod_spec(server)["serviceAccountName"], "namespace": "fleetpilot"} in (
        binding["subjects"]
    )
    assert not [r for r in all_resources() if r["kind"] == "Secret" and "agent" in r["metadata"]["name"]]


def test_no_token_is_ever_on_a_command_line() -> None:
    """`ps` shows every user a process's arguments: tokens travel in files or the environment."""
    for workload in all_resources():
        if "template" in workload.get("spec", {}):
            for container in containers(workload):
                line = " ".join([*container.get("command", []), *container.get("args", [])])
                assert "token" not in line.lower(), f"{workload['metadata']['name']}: {line}"


def test_the_agent_binds_the_node_address_only_and_gains_no_privileges() -> None:
    (container,) = pod_spec(find("DaemonSet", "fleetpilot-agent"))["containers"]
    env = {e["name"]: e for e in container["env"]}
    config = find("ConfigMap", "fleetpilot-agent")["data"]
    for name in ("FLEETPILOT_METRICS_HOST", "FLEETPILOT_SERVE_HOST"):
        assert name not in config
        assert env[name]["valueFrom"]["fieldRef"]["fieldPath"] == "status.hostIP"
    context = container["securityContext"]
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"]["drop"] == ["ALL"]
    assert "privileged" not in context


def test_the_server_may_scale_only_the_workloads_namespace() -> None:
    """The Role that patches deployments/scale lives apart from the server: it can never scale itself or its
    database (nor can kustomize's namespace transformer move it back)."""
    server = find("Deployment", "fleetpilot-server")
    own_namespace = server["metadata"]["namespace"]
    env = {e["name"]: e for e in pod_spec(server)["containers"][0]["env"]}
    workloads = env["FLEETPILOT_KUBERNETES_NAMESPACE"]["value"]
    assert workloads != own_namespace
    find("Namespace", workloads)
    scaling_roles = [
        r
        for r in all_resources()
        if r["kind"] in {"Role", "ClusterRole"} and any("deployments/scale" in rule["resources"] for rule in r["rules"])
    ]
    assert [(r["kind"], r["metadata"]["namespace"]) for r in scaling_roles] == [("Role", workloads)]
    assert find("RoleBinding", "fleetpilot-scaler")["metadata"]["namespace"] == workloads
    assert "namespace" not in documents(KUBERNETES / "kustomization.yaml")[0]


def test_the_server_runs_as_the_scaling_service_account_on_the_database_secret() -> None:
    server = find("Deployment", "fleetpilot-server")
    assert pod_spec(server)["serviceAccountName"] == "fleetpilot"
    find("ServiceAccount", "fleetpilot")
    role = find("Role", "fleetpilot-scaler")
    scale_rule = next(r for r in role["rules"] if "deployments/scale" in r["resources"])
    assert {"get", "patch"} <= set(scale_rule["verbs"])
    binding = find("RoleBinding", "fleetpilot-scaler")
    assert binding["roleRef"]["name"] == "fleetpilot-scaler"
    assert {"kind": "ServiceAccount", "name": "fleetpilot", "namespace": "fleetpilot"} in binding["subjects"]
    (container,) = pod_spec(server)["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["FLEETPILOT_ACTUATOR"]["value"] == "kubernetes"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_the_migrations_run_in_a_job_on_the_same_database() -> None:
    job = find("Job", "fleetpilot-db-upgrade")
    (container,) = pod_spec(job)["containers"]
    assert container["args"] == ["db", "upgrade"]
    server = pod_spec(find("Deployment", "fleetpilot-server"))["containers"][0]
    database = next(e for e in server["env"] if e["name"] == "FLEETPILOT_DATABASE_URL")
    assert database in container["env"]


def test_every_referenced_secret_key_and_service_account_exists() -> None:
    secrets = {r["metadata"]["name"]: set(r["stringData"]) for r in all_resources() if r["kind"] == "Secret"}
    accounts = {r["metadata"]["name"] for r in all_resources() if r["kind"] == "ServiceAccount"}
    for workload in all_resources():
        if "template" not in workload.get("spec", {}):
            continue
        account = pod_spec(workload).get("serviceAccountName")
        assert account is None or account in accounts
        for container in containers(workload):
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref is not None:
                    assert ref["key"] in secrets[ref["name"]], f"{ref} in {workload['metadata']['name']}"


def test_services_select_their_pods_and_name_real_ports() -> None:
    workloads = [r for r in all_resources() if r["kind"] in {"Deployment", "DaemonSet", "StatefulSet"}]
    for service in (r for r in all_resources() if r["kind"] == "Service"):
        selector = service["spec"]["selector"]
        (target,) = [w for w in workloads if selector.items() <= w["spec"]["template"]["metadata"]["labels"].items()]
        ports = {p["name"] for c in containers(target) for p in c.get("ports", [])}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports, service["metadata"]["name"]


@pytest.mark.parametrize("name", ["fleetpilot-server", "fleetpilot-agent"])
def test_service_monitors_are_well_formed_and_point_at_a_metrics_port(name: str) -> None:
    """The ServiceMonitor is a CRD whose schema kubernetes-validate does not bundle: checked by structure here."""
    monitor = find("ServiceMonitor", name)
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert set(monitor) == {"apiVersion", "kind", "metadata", "spec"}
    assert set(monitor["spec"]) <= {"selector", "namespaceSelector", "endpoints", "jobLabel"}
    selector = monitor["spec"]["selector"]["matchLabels"]
    services = [
        s for s in all_resources() if s["kind"] == "Service" and selector.items() <= s["metadata"]["labels"].items()
    ]
    assert len(services) == 1
    port_names = {p["name"] for p in services[0]["spec"]["ports"]}
    for endpoint in monitor["spec"]["endpoints"]:
        assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout", "relabelings"}
        assert endpoint["port"] in port_names and endpoint["path"] == "/metrics"
        assert endpoint["interval"].endswith("s")


def test_settings_and_flags_in_the_manifests_are_real() -> None:
    """Every FLEETPILOT_* variable is a setting of the deployable that reads it; every command line parses."""
    server_fields, agent_fields = set(ServerSettings.model_fields), set(AgentSettings.model_fields)
    agent_config = find("ConfigMap", "fleetpilot-agent")["data"]
    assert {k.removeprefix("FLEETPILOT_").lower() for k in agent_config} <= agent_fields
    parser = build_parser()
    for workload in (find("Deployment", "fleetpilot-server"), find("Job", "fleetpilot-db-upgrade")):
        for container in containers(workload):
            names = {e["name"].removeprefix("FLEETPILOT_").lower() for e in container["env"]}
            assert names <= server_fields
            parser.parse_args(container["args"])
    agent = pod_spec(find("DaemonSet", "fleetpilot-agent"))["containers"][0]
    assert {e["name"].removeprefix("FLEETPILOT_").lower() for e in agent["env"] if "FLEETPILOT_" in e["name"]} <= (
        agent_fields
    )


def workloads() -> list[Resource]:
    return [r for r in all_resources() if "template" in r.get("spec", {})]


@pytest.mark.parametrize("workload", workloads(), ids=lambda w: f"{w['kind']}/{w['metadata']['name']}")
def test_every_container_is_hardened(workload: Resource) -> None:
    """No privilege escalation, every capability dropped, the default seccomp profile, a read-only root filesystem
    (what a container writes is a mount), and no root but the agent's uid, whose needs its manifest says (uid 0
    without a capability: it writes the root-owned host directories the kubelet creates and joins a root MPS daemon)."""
    spec = pod_spec(workload)
    pod_context = spec.get("securityContext", {})
    mounted_volumes = {v["name"] for v in spec.get("volumes", [])} | {
        t["metadata"]["name"] for t in workload["spec"].get("volumeClaimTemplates", [])
    }
    for container in containers(workload):
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert context["readOnlyRootFilesystem"] is True
        assert "privileged" not in context
        assert context.get("runAsUser") != 0 or workload["metadata"]["name"] == "fleetpilot-agent"
        seccomp = context.get("seccompProfile") or pod_context.get("seccompProfile")
        assert seccomp == {"type": "RuntimeDefault"}
        assert {m["name"] for m in container.get("volumeMounts", [])} <= mounted_volumes
        assert "/tmp" in {m["mountPath"] for m in container.get("volumeMounts", [])}
    if workload["metadata"]["name"] != "fleetpilot-agent":
        assert pod_context["runAsNonRoot"] is True and pod_context["runAsUser"] != 0


def test_a_disruption_budget_keeps_a_server_up() -> None:
    budget = find("PodDisruptionBudget", "fleetpilot-server")
    server = find("Deployment", "fleetpilot-server")
    assert budget["metadata"]["namespace"] == server["metadata"]["namespace"]
    labels = server["spec"]["template"]["metadata"]["labels"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert budget["spec"]["minAvailable"] == 1 < server["spec"]["replicas"]


def test_network_policies_deny_by_default_and_open_only_named_ports_of_real_pods() -> None:
    """Every pod of the namespace is under the default deny; each allowing policy selects real pods and names
    ports those pods (or, for egress, their peers) declare."""
    policies = {r["metadata"]["name"]: r for r in all_resources() if r["kind"] == "NetworkPolicy"}
    deny = policies.pop("default-deny")
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    pods = {
        w["metadata"]["name"]: w
        for w in workloads()
        if w["metadata"]["namespace"] == deny["metadata"]["namespace"] and not pod_spec(w).get("hostNetwork")
    }

    def selected(selector: Resource) -> list[str]:
        labels = selector["matchLabels"]
        return [n for n, w in pods.items() if labels.items() <= w["spec"]["template"]["metadata"]["labels"].items()]

    assert {n for p in policies.values() for n in selected(p["spec"]["podSelector"])} == set(pods)
    for name, policy in policies.items():
        (target,) = selected(policy["spec"]["podSelector"])
        declared = {p["name"]: p["containerPort"] for c in containers(pods[target]) for p in c.get("ports", [])}
        for rule in policy["spec"].get("ingress", []):
            assert {p["port"] for p in rule["ports"]} <= set(declared), name
        for rule in policy["spec"].get("egress", []):
            for peer in rule.get("to", []):
                if "podSelector" in peer and "namespaceSelector" not in peer:
                    (peer_pod,) = selected(peer["podSelector"])
                    peer_ports = {p["containerPort"] for c in containers(pods[peer_pod]) for p in c.get("ports", [])}
                    assert {p["port"] for p in rule["ports"]} <= peer_ports, name


def test_the_agent_finds_the_nodes_engine_pods_and_their_gpus_with_read_only_rights() -> None:
    agent = find("DaemonSet", "fleetpilot-agent")
    spec = pod_spec(agent)
    (container,) = spec["containers"]
    config = find("ConfigMap", "fleetpilot-agent")["data"]
    assert config["FLEETPILOT_KUBERNETES_PODS"] == "true"
    # issue 35 #11: only the pools' workloads are believed, not any tenant's pod on the node
    assert json.loads(config["FLEETPILOT_KUBERNETES_POD_NAMESPACES"]) == ["fleetpilot-workloads"]
    assert find("Namespace", "fleetpilot-workloads")
    assert spec["automountServiceAccountToken"] is True
    socket_dir = str(Path(AgentSettings.model_fields["pod_resources_socket"].default).parent)
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == socket_dir)
    assert mount["readOnly"] is True
    volumes = {v["name"]: v for v in spec["volumes"]}
    assert volumes[mount["name"]]["hostPath"]["path"] == socket_dir
    role = find("ClusterRole", "fleetpilot-agent-pods-on-node")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    binding = find("ClusterRoleBinding", "fleetpilot-agent-pods-on-node")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": spec["serviceAccountName"], "namespace": agent["metadata"]["namespace"]}
    ]
