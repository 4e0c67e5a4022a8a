"""The example KEDA ScaledObject of ``deploy/kubernetes/``: valid against the schema of KEDA's own CRD (copied beside
this test; strict: an unknown field fails, as with ``kubectl apply --validate=strict``), and pointing at what exists:
the server Service's KEDA port, the port the server serves the scaler on, a pool name, the workloads' namespace; and
the mutual TLS between them: KEDA's TriggerAuthentication and the server's certificate files, each from a Secret."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
import yaml

from autoscaler.keda.scaler import POOL_KEY
from fleetpilot.settings import ServerSettings
from tests.deploy.test_kubernetes import KUBERNETES, Resource, documents, find, pod_spec
from wire.control import NAME_PATTERN

# what KEDA's external scaler reads from a TriggerAuthentication to dial with mutual TLS (keda.sh, External scaler)
KEDA_TLS_PARAMETERS = {"caCert", "tlsClientCert", "tlsClientKey"}

SCHEMA = Path(__file__).with_name("keda_scaledobject_schema.yaml")


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with every object that lists its properties closed to others (the API server's strict field
    validation; a structural schema would otherwise prune a typo silently)."""
    closed = copy.deepcopy(schema)
    nodes = [closed]
    while nodes:
        node = nodes.pop()
        if "properties" in node:
            node.setdefault("additionalProperties", False)
            nodes.extend(node["properties"].values())
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                nodes.append(node[key])
    return closed


def validator() -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(strict(yaml.safe_load(SCHEMA.read_text())))


def example(kind: str) -> Resource:
    (resource,) = [r for r in documents(KUBERNETES / "keda-scaledobject.yaml") if r["kind"] == kind]
    return resource


def scaled_object() -> Resource:
    return example("ScaledObject")


def example_secrets() -> dict[tuple[str, str], set[str]]:
    """(namespace, name) → the keys of each Secret in secrets.example.yaml."""
    found = documents(KUBERNETES / "secrets.example.yaml")
    return {(s["metadata"]["namespace"], s["metadata"]["name"]): set(s["stringData"]) for s in found}


def test_the_scaled_object_validates_against_kedas_crd_schema() -> None:
    resource = scaled_object()
    assert (resource["apiVersion"], resource["kind"]) == ("keda.sh/v1alpha1", "ScaledObject")
    errors = [f"{'.'.join(map(str, e.path))}: {e.message}" for e in validator().iter_errors(resource)]
    assert errors == []


@pytest.mark.parametrize(
    ("path", "typo"),
    [(("spec",), "maxReplicas"), (("spec", "triggers", 0), "metdata"), (("spec", "scaleTargetRef"), "namespace")],
)
def test_the_schema_rejects_a_wrong_field(path: tuple[str | int, ...], typo: str) -> None:
    """Not vacuous: a field KEDA does not know fails."""
    broken = copy.deepcopy(scaled_object())
    node: Any = broken
    for key in path:
        node = node[key]
    node[typo] = 3
    assert not validator().is_valid(broken)


def test_the_trigger_calls_the_servers_keda_port_for_a_pool() -> None:
    resource = scaled_object()
    (trigger,) = resource["spec"]["triggers"]
    assert trigger["type"] == "external"
    assert trigger["metricType"] == "AverageValue"  # KEDA's HPA: ceil(value / target), the served per-replica target
    assert re.fullmatch(NAME_PATTERN, trigger["metadata"][POOL_KEY])

    host, port = trigger["metadata"]["scalerAddress"].rsplit(":", 1)
    service = find("Service", host.split(".")[0])
    assert host == f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc.cluster.local"
    (keda_port,) = [p for p in service["spec"]["ports"] if p["port"] == int(port)]
    server = find("Deployment", "fleetpilot-server")
    (container,) = pod_spec(server)["containers"]
    (served,) = [p for p in container["ports"] if p["name"] == keda_port["targetPort"]]
    args = container["args"]
    assert args[args.index("--keda-port") + 1] == str(served["containerPort"])


def test_the_scaled_deployment_is_in_the_workloads_namespace() -> None:
    resource = scaled_object()
    env = {e["name"]: e for e in pod_spec(find("Deployment", "fleetpilot-server"))["containers"][0]["env"]}
    assert resource["metadata"]["namespace"] == env["FLEETPILOT_KUBERNETES_NAMESPACE"]["value"]
    assert resource["spec"]["scaleTargetRef"]["kind"] == "Deployment"
    assert resource["spec"]["minReplicaCount"] <= resource["spec"]["maxReplicaCount"]


def test_keda_dials_the_port_with_its_client_certificate_from_a_secret() -> None:
    resource, auth = scaled_object(), example("TriggerAuthentication")
    (trigger,) = resource["spec"]["triggers"]
    assert auth["apiVersion"] == "keda.sh/v1alpha1" and set(auth) == {"apiVersion", "kind", "metadata", "spec"}
    assert trigger["authenticationRef"] == {"name": auth["metadata"]["name"]}
    assert auth["metadata"]["namespace"] == resource["metadata"]["namespace"]  # KEDA looks it up there
    refs = auth["spec"]["secretTargetRef"]
    assert set(auth["spec"]) == {"secretTargetRef"} and all(set(r) == {"parameter", "name", "key"} for r in refs)
    assert {r["parameter"] for r in refs} == KEDA_TLS_PARAMETERS
    secrets = example_secrets()
    for ref in refs:
        assert ref["key"] in secrets[(auth["metadata"]["namespace"], ref["name"])], ref
    assert not {"unsafeSsl", "tlsCertFile"} & set(trigger["metadata"]), "no skipped verification, no deprecated key"


def test_the_server_serves_the_keda_port_with_tls_from_a_mounted_secret() -> None:
    server = find("Deployment", "fleetpilot-server")
    (container,) = pod_spec(server)["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    files = {name: env[f"FLEETPILOT_KEDA_TLS_{name.upper()}"] for name in ("cert_file", "key_file", "client_ca_file")}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod_spec(server)["volumes"]}
    for path in files.values():
        folder, key = path.rsplit("/", 1)
        mount = mounts[folder]
        secret = volumes[mount["name"]]["secret"]["secretName"]
        assert mount["readOnly"] is True
        assert key in example_secrets()[(server["metadata"]["namespace"], secret)], path
    args = container["args"]
    settings = {"host": args[args.index("--host") + 1], "keda_port": int(args[args.index("--keda-port") + 1])}
    # what the server validates at start: production serves a KEDA port off loopback only with its TLS
    ServerSettings(**settings, environment=env["FLEETPILOT_ENVIRONMENT"], database_url="postgresql://db/fleetpilot",
                   **{f"keda_tls_{name}": path for name, path in files.items()})  # fmt: skip
