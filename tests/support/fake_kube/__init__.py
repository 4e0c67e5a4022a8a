"""A fake Kubernetes API server on loopback, for the tests of what talks to Kubernetes (no cluster runs here).

It serves only what fleetpilot uses, each resource in its own module (``scale``: Deployments' scale subresource and
HPA lists), with ``Status`` objects for errors as the real server sends them: 401 without the bearer token, 404 for
an unknown object, 403 for the verbs in ``forbidden`` (a Role that lacks them). A real ``kubernetes.client.ApiClient``
talks to it over HTTP; every request is recorded.
"""

from tests.support.fake_kube.api import ApiError, RecordedRequest
from tests.support.fake_kube.scale import FakeDeployment
from tests.support.fake_kube.server import FakeKube

__all__ = ["ApiError", "FakeDeployment", "FakeKube", "RecordedRequest"]
