"""Scale targets: ``apiVersion/kind/namespace/name`` parsed, and each malformed part named in the error."""

from __future__ import annotations

import pytest

from fleet.pools import PoolSpec
from fleet.scale_targets import ScaleTarget
from wire.errors import FieldError


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("apps/v1/Deployment/serving/llama-8b", ScaleTarget("apps", "v1", "Deployment", "serving", "llama-8b")),
        (
            "leaderworkerset.x-k8s.io/v1/LeaderWorkerSet/serving/llama-70b",
            ScaleTarget("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet", "serving", "llama-70b"),
        ),
        ("v1/ReplicationController/default/rc.v2", ScaleTarget("", "v1", "ReplicationController", "default", "rc.v2")),
        (
            "serving.example.com/v1alpha1/InferencePool/a/b",
            ScaleTarget("serving.example.com", "v1alpha1", "InferencePool", "a", "b"),
        ),
    ],
)
def test_a_target_parses_and_writes_back_the_same(text: str, parsed: ScaleTarget) -> None:
    assert ScaleTarget.parse(text) == parsed
    assert str(parsed) == text


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("apps/v1/Deployment/llama", "expected apiVersion/kind/namespace/name"),
        ("a/apps/v1/Deployment/serving/llama", "expected apiVersion/kind/namespace/name"),
        ("Apps/v1/Deployment/serving/llama", "API group 'Apps' is not a DNS subdomain"),
        ("apps/1/Deployment/serving/llama", "version '1' is not v1 or v2beta1"),
        ("apps/v1/deployment/serving/llama", "kind 'deployment' is not CamelCase"),
        ("apps/v1/Deployment/Serving/llama", "namespace 'Serving' is not a DNS label"),
        ("apps/v1/Deployment/serving/Llama_8b", "name 'Llama_8b' is not a DNS subdomain"),
        ("apps/v1/Deployment/serving/", "name '' is not a DNS subdomain"),
        ("apps/v1/Deployment/serving/" + "a" * 600, "at most 512 characters"),
    ],
)
def test_a_malformed_target_names_what_is_wrong(text: str, named: str) -> None:
    with pytest.raises(FieldError, match=named) as caught:
        PoolSpec(scale_target=text)
    assert caught.value.field == "scale_target"


def test_without_a_target_a_pool_is_the_deployment_named_after_it() -> None:
    assert str(ScaleTarget.default("inference", "llama-8b")) == "apps/v1/Deployment/inference/llama-8b"
    assert PoolSpec().scale_target is None
