"""A real Prometheus scrapes fixture exporters (dcgm-exporter's and vLLM's formats) and remote-writes to a real
``fleetpilot server``: the samples stored are what the exporters served, converted as the mapping says; a series
no source reads is counted, never stored; a restart of Prometheus on its own data stores nothing twice.

The truth is the fixture's values for gauges, and for rates and p99 the scrapes as Prometheus' own TSDB holds
them (the scrape times are Prometheus'): the exporter's state changes once, from ``BEFORE`` to ``AFTER``, and the
one scrape interval that spans the change must give the rate and p99 that change implies.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, func, select

from collector.remote.derive import QUANTILE_WINDOW_SECONDS
from collector.remote.tables import remote_series
from collector.tables import NO_DEVICE, samples
from fleetpilot.launch import ServerProcess
from tests.support.fixture_exporter import DcgmGpu, FixtureExporter, VllmEngine, render_dcgm, render_vllm
from tests.support.prometheus import PrometheusProcess, RemoteWrite, require_program
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.prometheus]

WAIT_S = 45.0  # Prometheus 2.42's remote-write watcher sends its first batch about 5 s after start
NODE = "gpu-node-a"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
POOL = "llama-3.1-8b"  # a model name with a slash is no pool name (NAME_PATTERN): the team relabels it
GPUS = (
    DcgmGpu(0, "GPU-604ac76c", gpu_util_percent=87, fb_used_mib=40960, power_usage_w=312.25, gpu_temp_c=64),
    DcgmGpu(1, "GPU-91b2e0aa", gpu_util_percent=12, fb_used_mib=1024, power_usage_w=95.5, gpu_temp_c=41),
)
# 21 bounds; AFTER adds 36 requests at or below 0.5 s and 6 more at or below 0.8 s (p99: 0.5 + 0.3 × 5.58 / 6)
BEFORE = VllmEngine(model_name=MODEL, num_requests_waiting=3, generation_tokens_total=10_000)
AFTER = replace(
    BEFORE,
    num_requests_waiting=7,
    generation_tokens_total=16_300,
    e2e_latency_buckets=(0, 36) + (42,) * 19,
    e2e_latency_count=42,
    e2e_latency_sum_s=20.0,
)
EXPECTED_P99 = 0.5 + 0.3 * (0.99 * 42 - 36) / 6


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    require_program("prometheus")  # skip before starting anything
    with ServerProcess(f"sqlite:///{tmp_path / 'fleetpilot.db'}", log_path=tmp_path / "server.log") as server:
        yield server


def rows(server: ServerProcess, *columns: str) -> list[dict[str, Any]]:
    engine = create_engine(server.database_url)
    with engine.connect() as conn:
        query = select(*(samples.c[c] for c in ("ts", "device", "pool", *columns))).where(samples.c.node_id == NODE)
        found = [dict(r._mapping) for r in conn.execute(query.order_by(samples.c.ts))]
    engine.dispose()
    return found


def is_pool_row(row: dict[str, Any]) -> bool:
    """The pool's own sample (a GPU's carries the pool too: the series' fleetpilot_pool label)."""
    return bool(row["pool"] == POOL and row["device"] == NO_DEVICE)


def counter(server: ServerProcess, outcome: str) -> float:
    text = httpx.get(f"{server.url}/metrics", timeout=5.0).text
    pattern = rf'fleetpilot_collector_remote_points_total{{outcome="{outcome}",protocol="remote_write"}} (\S+)'
    found = re.search(pattern, text)
    return float(found.group(1)) if found else 0.0


def scrape_times(prometheus: PrometheusProcess, query: str) -> list[tuple[float, float]]:
    """(Unix seconds, value) of each scrape of one series, from Prometheus' own TSDB."""
    result = prometheus.query(f"{query}[5m]")
    assert len(result) == 1, result
    return [(float(ts), float(value)) for ts, value in result[0]["values"]]


def test_prometheus_remote_writes_dcgm_and_vllm_into_fleetpilot(server: ServerProcess, tmp_path: Path) -> None:
    token = server.create_token("remote_write")
    with (
        FixtureExporter(render_dcgm(GPUS)) as dcgm,
        FixtureExporter(render_vllm([BEFORE])) as vllm,
        PrometheusProcess(
            workdir=tmp_path / "prometheus",
            target=[dcgm.target, vllm.target],
            remote_write=RemoteWrite(f"{server.url}/api/v1/write", token),
            # how a team names the node and the pool of both exporters (a relabel, in production)
            target_labels={"node": NODE, "fleetpilot_pool": POOL},
            scrape_interval_s=1.0,
        ) as prometheus,
    ):
        wait_for(lambda: len({r["ts"] for r in rows(server) if is_pool_row(r)}) >= 2, timeout_s=WAIT_S)
        vllm.serve(render_vllm([AFTER]))
        wait_for(lambda: sum(r["queue_depth_requests"] == 7 for r in rows(server, "queue_depth_requests")) >= 3, WAIT_S)

        gpu_rows = rows(server, "gpu_utilization_ratio", "gpu_memory_used_bytes", "gpu_power_watts")
        for gpu in GPUS:
            mine = [r for r in gpu_rows if r["device"] == gpu.gpu]
            assert mine, gpu
            assert [r["gpu_utilization_ratio"] for r in mine] == pytest.approx([gpu.gpu_util_percent / 100] * len(mine))
            assert {r["gpu_memory_used_bytes"] for r in mine} == {gpu.fb_used_mib * 1024 * 1024}
            assert {r["gpu_power_watts"] for r in mine} == {gpu.power_usage_w}

        # the one scrape interval spanning the change: its rate and p99 are what the change implies
        tokens = scrape_times(prometheus, f'vllm:generation_tokens_total{{node="{NODE}"}}')
        (t_before, _), (t_after, _) = next((a, b) for a, b in itertools.pairwise(tokens) if b[1] > a[1])
        pool_rows = {
            r["ts"]: r
            for r in rows(
                server, "token_throughput_per_second", "request_latency_p99_seconds", "request_rate_per_second"
            )
            if is_pool_row(r)
        }
        spanning = _at(pool_rows, t_after)
        assert spanning["token_throughput_per_second"] == pytest.approx(6300 / (t_after - t_before), rel=1e-6)
        assert spanning["request_rate_per_second"] == pytest.approx(42 / (t_after - t_before), rel=1e-6)
        assert spanning["request_latency_p99_seconds"] == pytest.approx(EXPECTED_P99, rel=1e-6)
        steady = [r for ts, r in pool_rows.items() if abs(ts - t_after) > 1e-3 and ts > t_before]
        assert all(r["token_throughput_per_second"] == 0 for r in steady)
        for r in steady:  # p99 over the trailing 10 s: the change while it is in the window, then absent (not 0)
            in_window = r["ts"] - t_before <= QUANTILE_WINDOW_SECONDS
            assert r["request_latency_p99_seconds"] == (pytest.approx(EXPECTED_P99) if in_window else None), r

        node = httpx.get(f"{server.url}/api/v1/nodes/{NODE}", headers=_admin(server), timeout=5.0).json()
        assert node["source"] == "remote_write" and node["resolution_seconds"] == pytest.approx(1.0, abs=0.2)
        assert [g["uuid"] for g in node["gpus"]] == [g.uuid for g in GPUS]

        # unmapped: Prometheus' own `up`, dcgm-exporter's SM clock: counted, never staged or stored
        assert counter(server, "unmapped") > 0
        engine = create_engine(server.database_url)
        with engine.connect() as conn:
            names = set(conn.scalars(select(remote_series.c.name)))
        engine.dispose()
        assert "up" not in names and "DCGM_FI_DEV_SM_CLOCK" not in names
        assert "DCGM_FI_DEV_GPU_UTIL" in names

        # a restart on its own data: what it had sent is not stored again, and new scrapes go on
        before_restart = len(rows(server))
        prometheus.stop()
        prometheus.start()
        wait_for(lambda: len(rows(server)) >= before_restart + 3 * len(GPUS), timeout_s=WAIT_S)
    _assert_each_scrape_stored_once(server)


def _at(by_ts: dict[float, dict[str, Any]], ts: float) -> dict[str, Any]:
    found = [r for t, r in by_ts.items() if abs(t - ts) < 1e-3]
    assert len(found) == 1, (ts, sorted(by_ts))
    return found[0]


def _admin(server: ServerProcess) -> dict[str, str]:
    return {"Authorization": f"Bearer {server.admin_token}"}


def _assert_each_scrape_stored_once(server: ServerProcess) -> None:
    engine = create_engine(server.database_url)
    with engine.connect() as conn:
        keys = select(samples.c.ts, samples.c.device, samples.c.pool).where(samples.c.node_id == NODE)
        total = conn.scalar(select(func.count()).select_from(keys.subquery()))
        distinct = conn.scalar(select(func.count()).select_from(keys.distinct().subquery()))
    engine.dispose()
    assert total == distinct and total


def test_a_prometheus_only_fleet_sizes_its_gpus_and_names_an_unlabelled_vllms_pool(
    server: ServerProcess, tmp_path: Path
) -> None:
    """What a new user's first Prometheus gets (issue 39): dcgm-exporter's FB_USED and FB_FREE (its 3.3 counters have
    no FB_RESERVED) size each GPU, so memory is a share; a vLLM whose series carry no pool label serves a pool named
    after its model, one ``POST /pools`` accepts, with the model id kept."""
    token = server.create_token("remote_write")
    gpus = (
        DcgmGpu(0, "GPU-604ac76c", fb_used_mib=40960, fb_free_mib=40448),
        DcgmGpu(1, "GPU-91b2e0aa", fb_used_mib=1024, fb_free_mib=80384),
    )
    pool = "meta-llama--Llama-3.1-8B-Instruct"
    with (
        FixtureExporter(render_dcgm(gpus)) as dcgm,
        FixtureExporter(render_vllm([BEFORE])) as vllm,
        PrometheusProcess(
            workdir=tmp_path / "prometheus",
            target=[dcgm.target, vllm.target],
            remote_write=RemoteWrite(f"{server.url}/api/v1/write", token),
            target_labels={"node": NODE},  # a node label only: no relabel names the pool
            scrape_interval_s=1.0,
        ),
    ):
        node = wait_for(lambda: _sized_node(server), timeout_s=WAIT_S)
        wait_for(lambda: any(r["pool"] == pool for r in rows(server)), timeout_s=WAIT_S)
        # what Prometheus sends that no source reads is listed by family, never silently dropped
        unmapped = wait_for(lambda: _unmapped(server) >= {"up", "DCGM_FI_DEV_SM_CLOCK"} and _unmapped(server), WAIT_S)
    assert "DCGM_FI_DEV_FB_FREE" not in unmapped and "vllm:e2e_request_latency_seconds" not in unmapped
    sizes = {g["index"]: g["memory_total_bytes"] for g in node["gpus"]}
    assert sizes == {0: (40960 + 40448) * 1048576, 1: (1024 + 80384) * 1048576}
    replica = next(s for s in node["series"] if s["pool"] == pool and s["device"] is None)
    assert replica["extra"]["model"] == MODEL

    created = httpx.post(
        f"{server.url}/api/v1/pools",
        json={"name": pool, "engine": "vllm", "model": MODEL, "max_replicas": 2},
        headers=_admin(server),
        timeout=10.0,
    )
    assert created.status_code == 201, created.text
    assert created.json()["model"] == MODEL


def _unmapped(server: ServerProcess) -> set[str]:
    url = f"{server.url}/api/v1/unmapped-families?source=remote_write"
    return {i["name"] for i in httpx.get(url, headers=_admin(server), timeout=5.0).json()["items"]}


def _sized_node(server: ServerProcess) -> dict[str, Any] | None:
    """The node once each of its GPUs has a memory size and its vLLM pool a sample; None before."""
    answer = httpx.get(f"{server.url}/api/v1/nodes/{NODE}", headers=_admin(server), timeout=5.0)
    if answer.status_code != 200:
        return None
    node: dict[str, Any] = answer.json()
    sized = len(node["gpus"]) == 2 and all(g["memory_total_bytes"] for g in node["gpus"])
    served = any(s["pool"] and s["device"] is None for s in node["series"])
    return node if sized and served else None
