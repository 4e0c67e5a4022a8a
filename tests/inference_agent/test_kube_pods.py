"""Engines found on the node: the pods of this node with fleetpilot's annotations, listed and watched on the fake
API server, each scraped from a real HTTP metrics endpoint (the engine fixtures) as its pool."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.resources import files
from pathlib import Path
from typing import Any

import certifi
import httpx
import pytest
from prometheus_client import CollectorRegistry

from inference_agent.kube.annotations import BadAnnotation, PodEngine, engine_of
from inference_agent.kube.api_client import Gone, KubeApi, KubeApiError, TokenFile
from inference_agent.kube.discovered_engines import DiscoveredEngines, choose_engines
from inference_agent.kube.pod_scope import PodScope, parse_label_selector
from inference_agent.kube.pod_watch import PodWatch, next_backoff
from inference_agent.probes.base import Reading
from inference_agent.telemetry import AgentTelemetry
from tests.support.fake_kube import FakeKube
from tests.support.fake_kube.pods import pod_object
from tests.support.waiting import wait_for
from wire.scrape.engines import EngineKind

NODE = "gpu-node-1"
CREATED = "2026-12-04T10:00:00Z"  # pod_object's creationTimestamp
ML = PodScope(namespaces=frozenset({"ml"}))  # the namespace every pod of these tests runs in


def annotated(pool: str = "chat", engine: str = "vllm", port: str = "8000", **more: str) -> dict[str, str]:
    return {"fleetpilot.io/pool": pool, "fleetpilot.io/engine": engine, "fleetpilot.io/metrics-port": port, **more}


@pytest.mark.parametrize(
    ("annotations", "status", "expected"),
    [
        (annotated(), {}, PodEngine("ml/a", "chat", EngineKind.VLLM, "http://10.0.0.7:8000/metrics", CREATED)),
        (
            annotated(engine="tgi", port="80", **{"fleetpilot.io/metrics-path": "/prom"}),
            {},
            PodEngine("ml/a", "chat", EngineKind.TGI, "http://10.0.0.7:80/prom", CREATED),
        ),
        (
            annotated(),
            {"podIP": "fd00::7"},
            PodEngine("ml/a", "chat", EngineKind.VLLM, "http://[fd00::7]:8000/metrics", CREATED),
        ),
        ({"app": "x"}, {}, None),  # not ours
        (annotated(), {"phase": "Pending"}, None),  # not yet
        (annotated(), {"podIP": ""}, None),
    ],
)
def test_a_pods_annotations_name_its_engine(
    annotations: dict[str, str], status: dict[str, str], expected: PodEngine | None
) -> None:
    pod = pod_object("ml", "a", NODE, annotations=annotations, pod_ip="10.0.0.7")
    pod["status"].update(status)
    assert engine_of(pod) == expected


@pytest.mark.parametrize(
    ("annotations", "named"),
    [
        (annotated(engine="vlm"), "fleetpilot.io/engine 'vlm' is not one of vllm, sglang, tgi, triton, llamacpp"),
        (annotated(port="http"), "fleetpilot.io/metrics-port 'http' is not a port number"),
        (annotated(port="70000"), "fleetpilot.io/metrics-port '70000' is not a port number"),
        (annotated(pool="no spaces"), "fleetpilot.io/pool 'no spaces' is not a pool name"),
        ({"fleetpilot.io/pool": "chat"}, "fleetpilot.io/engine is missing"),
        (annotated(**{"fleetpilot.io/metrics-path": "metrics"}), "fleetpilot.io/metrics-path 'metrics' is not a URL"),
        (annotated(**{"fleetpilot.io/metrics-path": "/a b"}), "fleetpilot.io/metrics-path '/a b' is not a URL path"),
        (annotated(**{"fleetpilot.io/metrics-path": "/" * 300}), "256 characters at most"),
    ],
)
def test_a_wrong_annotation_is_named_with_its_pod(annotations: dict[str, str], named: str) -> None:
    with pytest.raises(BadAnnotation, match=r"^pod ml/a: ") as refused:
        engine_of(pod_object("ml", "a", NODE, annotations=annotations))
    assert named in str(refused.value)


def test_one_pod_per_pool_is_read_and_flag_pools_stay_theirs() -> None:
    found = {
        key: PodEngine(key, pool, EngineKind.VLLM, f"http://{key}")
        for key, pool in [("ml/b", "chat"), ("ml/a", "chat"), ("ml/c", "code"), ("ml/d", "static")]
    }
    chosen, skipped = choose_engines(found, reserved_pools={"static"})
    assert sorted(chosen) == ["ml/a", "ml/c"]
    assert skipped == {
        "ml/b": "pool chat is read from pod ml/a already",
        "ml/d": "pool static is read from the engine --engine/--config names",
    }


def test_backoff_doubles_to_thirty_seconds() -> None:
    waits = [next_backoff(None)]
    for _ in range(6):
        waits.append(next_backoff(waits[-1]))
    assert waits == [1, 2, 4, 8, 16, 30, 30]


class MetricsEndpoint:
    """A real HTTP ``/metrics`` answering one engine fixture's exposition text (``serve`` switches it)."""

    def __init__(self, fixture: str) -> None:
        self.text = _fixture(fixture)
        self.scrapes = 0
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                endpoint.scrapes += 1
                body = endpoint.text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _fixture(name: str) -> str:
    return files("inference_agent.probes").joinpath("fixtures", "engines", f"{name}.prom").read_text()


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube() as fake:
        yield fake


@pytest.fixture
def token_file(tmp_path: Path, kube: FakeKube) -> Path:
    path = tmp_path / "token"
    path.write_text(kube.token + "\n")
    return path


@pytest.fixture
def api(kube: FakeKube, token_file: Path) -> Iterator[KubeApi]:
    client = KubeApi(kube.url, TokenFile(token_file))
    yield client
    client.close()


@pytest.fixture
def endpoints() -> Iterator[Callable[[str], MetricsEndpoint]]:
    made: list[MetricsEndpoint] = []

    def make(fixture: str) -> MetricsEndpoint:
        made.append(MetricsEndpoint(fixture))
        return made[-1]

    yield make
    for endpoint in made:
        endpoint.close()


@pytest.fixture
def engines(api: KubeApi) -> Iterator[DiscoveredEngines]:
    discovered = DiscoveredEngines(0.05)
    discovered.follow(PodWatch(api, NODE, discovered.update, scope=ML))
    yield discovered
    discovered.close()


def scraped(engines: DiscoveredEngines) -> dict[str, Reading]:
    """Pod → its latest reading, once it has metrics."""
    return {r.extra["pod"]: r for r in engines.read() if r.metrics}


def test_pods_on_the_node_are_scraped_as_their_pools_as_they_come_and_go(
    kube: FakeKube, engines: DiscoveredEngines, endpoints: Callable[[str], MetricsEndpoint]
) -> None:
    vllm, tgi = endpoints("vllm_scrape_1"), endpoints("tgi_scrape_1")
    kube.add_pod("ml", "chat-0", NODE, annotations=annotated("chat", "vllm", str(vllm.port)))
    kube.add_pod("ml", "elsewhere", "gpu-node-2", annotations=annotated("other", "vllm", str(vllm.port)))
    first = wait_for(lambda: scraped(engines).get("ml/chat-0"))
    assert first.pool == "chat"
    assert first.metrics["queue_depth_requests"] >= 0  # a gauge of the vLLM fixture, read from its endpoint

    # a pod that comes after the list is seen through the watch; one that is not Running yet is not read
    kube.add_pod("ml", "gen-0", NODE, annotations=annotated("gen", "tgi", str(tgi.port)), phase="Pending")
    kube.add_pod("ml", "gen-0", NODE, annotations=annotated("gen", "tgi", str(tgi.port)))
    wait_for(lambda: "ml/gen-0" in scraped(engines))
    assert {r.pool for r in scraped(engines).values()} == {"chat", "gen"}

    kube.delete_pod("ml", "chat-0")
    wait_for(lambda: set(scraped(engines)) == {"ml/gen-0"})
    scrapes = vllm.scrapes
    time.sleep(0.3)
    assert vllm.scrapes == scrapes  # no longer scraped at all, not only left out


def test_a_read_pods_absent_metrics_are_served_while_it_is_read(
    kube: FakeKube, engines: DiscoveredEngines, endpoints: Callable[[str], MetricsEndpoint]
) -> None:
    telemetry = AgentTelemetry(CollectorRegistry())
    engines.report_absences(telemetry.watch_engine, telemetry.unwatch_engine)
    tgi = endpoints("tgi_scrape_1")
    kube.add_pod("ml", "gen-0", NODE, annotations=annotated("gen", "tgi", str(tgi.port)))
    wait_for(lambda: "ml/gen-0" in scraped(engines))

    def absent() -> dict[str, str]:
        return {
            s.labels["metric"]: s.labels["reason"]
            for family in telemetry.registry.collect()
            if family.name == "fleetpilot_agent_engine_metric_absent"
            for s in family.samples
            if s.labels["pool"] == "gen"
        }

    assert absent()["kv_cache_utilization_ratio"] == "tgi exposes no KV-cache metric"
    kube.delete_pod("ml", "gen-0")
    wait_for(lambda: not scraped(engines))
    assert absent() == {}


def test_a_pod_whose_annotations_change_is_read_as_they_now_say(
    kube: FakeKube, engines: DiscoveredEngines, endpoints: Callable[[str], MetricsEndpoint]
) -> None:
    vllm = endpoints("vllm_scrape_1")
    kube.add_pod("ml", "chat-0", NODE, annotations=annotated("chat", "vllm", str(vllm.port)))
    wait_for(lambda: "ml/chat-0" in scraped(engines))
    kube.add_pod("ml", "chat-0", NODE, annotations=annotated("chat-v2", "vllm", str(vllm.port)))
    wait_for(lambda: [r.pool for r in scraped(engines).values()] == ["chat-v2"])
    assert engines.pools_by_pod() == {"ml/chat-0": "chat-v2"}


def test_a_410_gone_lists_again_and_sees_what_changed_meanwhile(
    kube: FakeKube, engines: DiscoveredEngines, endpoints: Callable[[str], MetricsEndpoint]
) -> None:
    vllm = endpoints("vllm_scrape_1")
    kube.add_pod("ml", "chat-0", NODE, annotations=annotated("chat", "vllm", str(vllm.port)))
    wait_for(lambda: "ml/chat-0" in scraped(engines))
    kube.pod_events.compact()  # every version the watch holds is now too old
    kube.add_pod("ml", "code-0", NODE, annotations=annotated("code", "vllm", str(vllm.port)))
    kube.pod_events.compact()
    kube.pod_events.drop_watches()  # the watch resumes from its version and gets ERROR 410
    wait_for(lambda: "ml/code-0" in scraped(engines))
    lists = [r for r in kube.sent("GET") if r.path == "/api/v1/pods" and "watch" not in r.query]
    assert len(lists) == 2
    assert all(r.query["fieldSelector"] == f"spec.nodeName={NODE}" for r in lists)


def test_a_stream_the_server_ends_is_watched_again_from_its_version(kube: FakeKube, engines: DiscoveredEngines) -> None:
    def watches() -> list[str]:
        return [r.query["resourceVersion"] for r in kube.sent("GET") if r.query.get("watch") == "1"]

    wait_for(watches)
    kube.add_pod("ml", "a", NODE)
    wait_for(lambda: kube.pod_events.version == 2)
    time.sleep(0.2)
    kube.pod_events.drop_watches()
    wait_for(lambda: len(watches()) == 2)
    assert watches() == ["1", "2"]  # from the version of the last event seen, without listing again
    assert len([r for r in kube.sent("GET") if "watch" not in r.query]) == 1


def test_an_api_server_that_cannot_be_reached_is_retried(token_file: Path, caplog: pytest.LogCaptureFixture) -> None:
    with FakeKube() as gone:
        url = gone.url
    api = KubeApi(url, TokenFile(token_file))
    discovered = DiscoveredEngines(0.05)
    with caplog.at_level(logging.WARNING, logger="inference_agent.kube"):
        discovered.follow(PodWatch(api, NODE, discovered.update, scope=ML))
        wait_for(lambda: any("listing again in 1 s" in r.getMessage() for r in caplog.records))
        discovered.close()
    assert discovered.read() == []


def test_bad_annotations_skip_the_pod_with_one_log_line(
    kube: FakeKube,
    engines: DiscoveredEngines,
    endpoints: Callable[[str], MetricsEndpoint],
    caplog: pytest.LogCaptureFixture,
) -> None:
    vllm = endpoints("vllm_scrape_1")
    with caplog.at_level(logging.WARNING, logger="inference_agent.kube"):
        kube.add_pod("ml", "typo", NODE, annotations=annotated("chat", "vlm", str(vllm.port)))
        kube.add_pod("ml", "noport", NODE, annotations=annotated("code", "vllm", "http"))
        kube.add_pod("ml", "good", NODE, annotations=annotated("gen", "vllm", str(vllm.port)))
        wait_for(lambda: "ml/good" in scraped(engines))
        kube.add_pod("ml", "other", NODE)  # more events: the refusals are not logged again
        time.sleep(0.3)
    assert set(scraped(engines)) == {"ml/good"}
    refusals = [r.getMessage() for r in caplog.records if "is not read" in r.getMessage()]
    assert sorted(refusals) == [
        "pod ml/noport: fleetpilot.io/metrics-port 'http' is not a port number (1-65535); the pod is not read",
        "pod ml/typo: fleetpilot.io/engine 'vlm' is not one of vllm, sglang, tgi, triton, llamacpp; "
        "the pod is not read",
    ]


def test_the_fake_refuses_a_selector_it_does_not_know_as_the_real_server(kube: FakeKube) -> None:
    answer = httpx.get(
        f"{kube.url}/api/v1/pods",
        params={"fieldSelector": "spec.hostname=x"},
        headers={"Authorization": f"Bearer {kube.token}"},
    )
    assert answer.status_code == 400
    assert answer.json()["message"] == "field label not supported: spec.hostname"


def test_a_too_old_version_is_gone(kube: FakeKube, api: KubeApi) -> None:
    kube.add_pod("ml", "a", NODE)
    _, version = api.list_pods(NODE)
    kube.pod_events.compact()
    kube.add_pod("ml", "b", NODE)
    with pytest.raises(Gone, match="too old resource version"):
        next(iter(api.watch_pods(NODE, str(int(version) - 1))))


def test_the_token_file_is_read_again_when_it_rotates(kube: FakeKube, api: KubeApi, token_file: Path) -> None:
    assert api.list_pods(NODE)[0] == []
    kube.token = "rotated-token"
    token_file.write_text("rotated-token\n")
    assert api.list_pods(NODE)[0] == []
    assert kube.requests[-1].headers["authorization"] == "Bearer rotated-token"
    token_file.write_text("stale-token-x\n")
    with pytest.raises(KubeApiError, match="401"):
        api.list_pods(NODE)


def test_in_a_pod_the_api_server_is_the_service_and_its_ca_verifies_it(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text(Path(certifi.where()).read_text())  # any PEM bundle stands in for the cluster's
    (tmp_path / "token").write_text("service-account-token\n")
    env = {"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}
    api = KubeApi.in_cluster(env, tmp_path)
    try:
        assert api.base_url == "https://[fd00::1]:443"
    finally:
        api.close()


def test_outside_a_pod_in_cluster_says_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(KubeApiError, match="KUBERNETES_SERVICE_HOST/PORT are unset"):
        KubeApi.in_cluster({}, tmp_path)
    with pytest.raises(KubeApiError, match="no CA bundle"):
        KubeApi.in_cluster({"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}, tmp_path)


def test_the_agent_started_with_kubernetes_pods_outside_a_pod_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from fleetpilot.cli import main

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    argv = ["agent", "--collector", "http://127.0.0.1:9", "--token-file", str(token_file_of(tmp_path))]
    argv += ["--gpu-probe", "none", "--spool-dir", str(tmp_path / "spool"), "--kubernetes-pods", "--node-id", NODE]
    assert main(argv) == 2
    assert "--kubernetes-pods: Kubernetes API: KUBERNETES_SERVICE_HOST/PORT are unset" in capsys.readouterr().err


def token_file_of(folder: Path) -> Path:
    path = folder / "agent-token"
    path.write_text("agent-token-0123456789\n")
    return path


# Issue 35 #11: discovery believes only the pods in the namespaces (and labels) it is given, never a hostNetwork pod
# unless allowed, and a pod outside never takes a pool from one inside.


def scoped_engines(api: KubeApi, scope: PodScope) -> DiscoveredEngines:
    discovered = DiscoveredEngines(0.05)
    discovered.follow(PodWatch(api, NODE, discovered.update, scope=scope))
    return discovered


def test_a_pod_outside_the_namespaces_read_never_takes_a_pool_nor_is_scraped(
    kube: FakeKube, api: KubeApi, endpoints: Callable[[str], MetricsEndpoint], caplog: pytest.LogCaptureFixture
) -> None:
    serving, tenant = endpoints("vllm_scrape_1"), endpoints("vllm_scrape_1")
    engines = scoped_engines(api, PodScope(namespaces=frozenset({"ml"})))
    try:
        with caplog.at_level(logging.WARNING, logger="inference_agent.kube"):
            # "a-tenant/aaa" sorts before "ml/chat-0", and is older: neither wins it the pool
            kube.add_pod(
                "a-tenant",
                "aaa",
                NODE,
                annotations=annotated("chat", "vllm", str(tenant.port)),
                created="2026-01-01T00:00:00Z",
            )
            kube.add_pod("ml", "chat-0", NODE, annotations=annotated("chat", "vllm", str(serving.port)))
            wait_for(lambda: "ml/chat-0" in scraped(engines))
            time.sleep(0.2)
        assert set(scraped(engines)) == {"ml/chat-0"}
        assert tenant.scrapes == 0
        assert engines.pools_by_pod() == {"ml/chat-0": "chat"}  # no GPU of the tenant's is attributed to the pool
        assert any(
            "pod a-tenant/aaa: namespace a-tenant is not one of the namespaces read (ml)" in r.getMessage()
            for r in caplog.records
        )
    finally:
        engines.close()


@pytest.mark.parametrize("allowed", [False, True])
def test_a_host_network_pod_is_believed_only_when_allowed(
    kube: FakeKube, api: KubeApi, endpoints: Callable[[str], MetricsEndpoint], allowed: bool
) -> None:
    """A hostNetwork pod's IP is the node's: its metrics-port could name the kubelet's or the agent's own port."""
    node_port = endpoints("vllm_scrape_1")
    engines = scoped_engines(api, PodScope(namespaces=frozenset({"ml"}), host_network=allowed))
    try:
        annotations = annotated("chat", "vllm", str(node_port.port))
        kube.add_pod("ml", "hostnet", NODE, annotations=annotations, host_network=True, host_ip="127.0.0.1")
        kube.add_pod("ml", "marker", NODE, annotations=annotated("gen", "vllm", str(node_port.port)))
        wait_for(lambda: "ml/marker" in scraped(engines))  # the watch has seen both pods
        assert ("ml/hostnet" in scraped(engines)) is allowed
    finally:
        engines.close()


def test_a_label_selector_narrows_the_pods_read(
    kube: FakeKube, api: KubeApi, endpoints: Callable[[str], MetricsEndpoint]
) -> None:
    vllm = endpoints("vllm_scrape_1")
    scope = PodScope(namespaces=frozenset({"ml"}), labels=parse_label_selector("app.kubernetes.io/part-of=serving"))
    engines = scoped_engines(api, scope)
    try:
        labels = {"app.kubernetes.io/part-of": "serving"}
        kube.add_pod("ml", "unlabelled", NODE, annotations=annotated("chat", "vllm", str(vllm.port)))
        kube.add_pod("ml", "labelled", NODE, annotations=annotated("gen", "vllm", str(vllm.port)), labels=labels)
        wait_for(lambda: "ml/labelled" in scraped(engines))
        assert set(scraped(engines)) == {"ml/labelled"}
    finally:
        engines.close()


def test_of_two_pods_of_a_pool_the_older_is_read_whatever_their_names() -> None:
    found = {
        "ml/aaa": PodEngine("ml/aaa", "chat", EngineKind.VLLM, "http://new", created="2026-12-04T12:00:00Z"),
        "ml/zzz": PodEngine("ml/zzz", "chat", EngineKind.VLLM, "http://old", created="2026-12-01T08:00:00Z"),
    }
    chosen, skipped = choose_engines(found, reserved_pools=())
    assert sorted(chosen) == ["ml/zzz"]
    assert skipped == {"ml/aaa": "pool chat is read from pod ml/zzz already"}


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("app=vllm", (("app", "vllm"),)),
        ("app==vllm, tier=gpu", (("app", "vllm"), ("tier", "gpu"))),
        ("", ()),
    ],
)
def test_a_label_selector_is_equality_pairs(selector: str, expected: tuple[tuple[str, str], ...]) -> None:
    assert parse_label_selector(selector) == expected


@pytest.mark.parametrize("selector", ["app!=vllm", "app in (a,b)", "app", "=x", "a b=c"])
def test_a_label_selector_it_cannot_match_exactly_is_refused(selector: str) -> None:
    with pytest.raises(ValueError, match="kubernetes_pod_selector"):
        parse_label_selector(selector)


def test_by_default_the_namespace_read_is_the_agents_own(tmp_path: Path) -> None:
    (tmp_path / "namespace").write_text("fleetpilot-workloads\n")
    assert PodScope.of(namespaces=[], selector=None, host_network=False, account_dir=tmp_path).namespaces == {
        "fleetpilot-workloads"
    }
    explicit = PodScope.of(namespaces=["a", "b"], selector=None, host_network=False, account_dir=tmp_path / "none")
    assert explicit.namespaces == {"a", "b"}
    with pytest.raises(KubeApiError, match="name the namespaces to read"):
        PodScope.of(namespaces=[], selector=None, host_network=False, account_dir=tmp_path / "none")
