"""A fake Kubernetes API server on loopback, for the tests of what talks to Kubernetes (no cluster runs here).

It serves only what fleetpilot uses, each resource in its own module (``discovery``: the API discovery lists of
``FakeKube.kinds``; ``scale``: the scale subresource of any workload kind that has one; ``autoscalers``: HPA and
KEDA ScaledObject lists), with ``Status`` objects for errors as the real server sends them: 401 without the bearer
token, 404 for an unknown object, 403 for the verbs in ``forbidden`` (a Role that lacks them) and in the namespaces
in ``forbidden_namespaces``. A real ``kubernetes.client.ApiClient`` talks to it over HTTP; every request is recorded.
"""

from tests.support.fake_kube.api import ApiError, RecordedRequest
from tests.support.fake_kube.discovery import LEADER_WORKER_SET, SCALED_OBJECT, FakeKind
from tests.support.fake_kube.scale import FakeWorkload
from tests.support.fake_kube.server import FakeKube

__all__ = [
    "LEADER_WORKER_SET",
    "SCALED_OBJECT",
    "ApiError",
    "FakeKind",
    "FakeKube",
    "FakeWorkload",
    "RecordedRequest",
]
