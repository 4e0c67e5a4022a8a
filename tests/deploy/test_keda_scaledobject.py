"""The example KEDA ScaledObject of ``deploy/kubernetes/``: valid against the schema of KEDA's own CRD (copied beside
this test; strict: an unknown field fails, as with ``kubectl apply --validate=strict``), and pointing at what exists:
the server Service's KEDA port, the port the server serves the scaler on, a pool name, the workloads' namespace."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import pytest
import yaml

from autoscaler.keda.scaler import POOL_KEY
from collector.control import NAME_PATTERN
from tests.deploy.test_kubernetes import KUBERNETES, Resource, documents, find, pod_spec

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


def scaled_object() -> Resource:
    (resource,) = documents(KUBERNETES / "keda-scaledobject.yaml")
    return resource


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
