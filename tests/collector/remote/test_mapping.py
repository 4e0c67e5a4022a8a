"""The mapping file: the shipped defaults place each exporter's series, and a bad file is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.remote.mapping import MappingError, SeriesPlace, Unplaced, family_of, load_mapping, parse_mapping

DEFAULTS = load_mapping()
DCGM = {"gpu": "3", "UUID": "GPU-5fd4", "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "gpu-node-7"}


@pytest.mark.parametrize(
    ("labels", "place"),
    [
        ({"__name__": "DCGM_FI_DEV_GPU_UTIL", **DCGM}, SeriesPlace("dcgm-exporter", "gpu-node-7", 3, None)),
        # a relabelled `node` wins over dcgm-exporter's own Hostname (in a pod: the pod's name)
        (
            {"__name__": "DCGM_FI_DEV_FB_USED", **DCGM, "node": "ip-10-0-1-7", "pool": "llama-8b"},
            SeriesPlace("dcgm-exporter", "ip-10-0-1-7", 3, "llama-8b"),
        ),
        (
            {"__name__": "node_network_receive_bytes_total", "device": "eth0", "instance": "10.0.1.7:9100"},
            SeriesPlace("node-exporter", "10.0.1.7", None, None),
        ),
        (
            {
                "__name__": "vllm:e2e_request_latency_seconds_bucket",
                "le": "0.5",
                "model_name": "llama",
                "instance": "[fd00::7]:8000",
            },
            SeriesPlace("vllm", "fd00::7", None, "llama", "llama"),
        ),
        (
            {"__name__": "vllm:num_requests_waiting", "model_name": "llama", "pool": "chat", "instance": "a:8000"},
            SeriesPlace("vllm", "a", None, "chat", "llama"),
        ),
        (
            {"__name__": "sglang:num_queue_reqs", "model_name": "qwen", "instance": "b:30000"},
            SeriesPlace("sglang", "b", None, "qwen", "qwen"),
        ),
        # a Hugging Face id names no pool as it is: the pool is named after it, and keeps it as its model
        (
            {"__name__": "vllm:num_requests_waiting", "model_name": "meta-llama/Llama-3.1-8B-Instruct", "node": "g"},
            SeriesPlace("vllm", "g", None, "meta-llama--Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"),
        ),
        (
            {"__name__": "dynamo_frontend_queued_requests", "model": "Qwen/Qwen3-0.6B", "node": "g"},
            SeriesPlace("dynamo", "g", None, "Qwen--Qwen3-0.6B", "Qwen/Qwen3-0.6B"),
        ),
        (
            {"__name__": "tgi_queue_size", "instance": "c:80", "job": "tgi-mistral"},
            SeriesPlace("tgi", "c", None, "tgi-mistral"),
        ),
        (
            {"__name__": "nv_inference_request_success", "model": "resnet50", "instance": "d:8002", "job": "triton"},
            SeriesPlace("triton", "d", None, "triton"),
        ),
    ],
)
def test_the_defaults_place_each_exporters_series(labels: dict[str, str], place: SeriesPlace) -> None:
    found = DEFAULTS.source_of(labels)
    assert found is not None
    source, _family = found
    assert source.place(labels) == place


@pytest.mark.parametrize(
    "labels",
    [
        {"__name__": "go_goroutines", "instance": "a:9400"},
        {"__name__": "DCGM_FI_DEV_SM_CLOCK", **DCGM},  # dcgm-exporter's, but no metric reads it
        {"__name__": "node_network_receive_bytes_total", "device": "lo", "instance": "a:9100"},
        {"__name__": "node_network_transmit_bytes_total", "device": "veth3a9f", "instance": "a:9100"},
        {"__name__": "vllm:cache_config_info", "instance": "a:8000"},  # vLLM's, but neither a metric nor an extra
    ],
)
def test_series_no_source_reads_are_unmapped(labels: dict[str, str]) -> None:
    assert DEFAULTS.source_of(labels) is None


@pytest.mark.parametrize(
    ("labels", "reason"),
    [
        ({"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0"}, "no_node"),
        ({"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "GPU-5fd4", "Hostname": "a"}, "bad_device"),
        ({"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "Hostname": "a" * 129}, "bad_name"),
        ({"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "Hostname": "../../settings"}, "bad_name"),
        ({"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "Hostname": "a", "pool": "a/b"}, "bad_name"),
        # a pool label is the team's own choice: refused as it is, never renamed
        ({"__name__": "vllm:num_requests_waiting", "model_name": "m", "pool": "a/b", "node": "a"}, "bad_name"),
    ],
)
def test_a_series_that_cannot_be_placed_says_why(labels: dict[str, str], reason: str) -> None:
    found = DEFAULTS.source_of(labels)
    assert found is not None
    unplaced = found[0].place(labels)
    assert isinstance(unplaced, Unplaced) and unplaced.reason == reason


def test_family_of_takes_the_exposition_suffixes_off() -> None:
    families = frozenset({"vllm:e2e_request_latency_seconds", "tgi_request_count"})
    assert family_of("vllm:e2e_request_latency_seconds_bucket", families) == "vllm:e2e_request_latency_seconds"
    assert family_of("vllm:e2e_request_latency_seconds_count", families) == "vllm:e2e_request_latency_seconds"
    assert family_of("tgi_request_count", families) == "tgi_request_count"
    assert family_of("tgi_request_count_created", families) is None


def test_a_custom_mapping_in_toml(tmp_path: Path) -> None:
    path = tmp_path / "mapping.toml"
    path.write_text(
        '[[sources]]\nname = "amd"\nnode = ["hostname"]\ndevice = "gpu_id"\n'
        '[sources.metrics.gpu_utilization_ratio]\ngauge = "amd_gpu_gfx_activity"\nscale = 0.01\n'
    )
    mapping = load_mapping(path)
    labels = {"__name__": "amd_gpu_gfx_activity", "hostname": "mi300-1", "gpu_id": "5"}
    found = mapping.source_of(labels)
    assert found is not None and found[0].place(labels) == SeriesPlace("amd", "mi300-1", 5, None)


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("sources: []", "sources: List should have at least 1 item"),
        ("sources:\n- {name: a, node: [n], metrics: {gpu_fun: {gauge: x}}}", "not catalog metrics: gpu_fun"),
        ("sources:\n- {name: a, node: [n], engine: vllm, metrics: {gpu_power_watts: {gauge: x}}}", "either an engine"),
        ("sources:\n- {name: a, node: [n]}", "either an engine"),
        ("sources:\n- {name: a, node: [n], engine: vllm, exclude: {device: '(('}}", "exclude.device"),
        ("sources:\n- {name: a, node: [n], engine: vllm}\n- {name: a, node: [m], engine: tgi}", "unique: a"),
        ("sources:\n- {name: a, node: [], engine: vllm}", "sources.0.node"),
        ("sources:\n- {name: a, node: [n], engine: vllm, max_series: 0}", "sources.0.max_series"),
        ("sources:\n- {name: a, node: [n], engine: vllm, memory_total: {sum: []}}", "memory_total.sum"),
        ("sources: [", "not valid YAML"),
    ],
)
def test_a_bad_mapping_is_refused_naming_what_is_wrong(text: str, names: str) -> None:
    with pytest.raises(MappingError, match=r"custom\.yaml") as raised:
        parse_mapping(text, name="custom.yaml")
    assert names in str(raised.value)


def test_a_missing_mapping_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(MappingError, match=r"nowhere\.yaml: cannot be read"):
        load_mapping(tmp_path / "nowhere.yaml")


def test_otlp_resource_labels_and_dynamo_names_are_placed() -> None:
    labels = {
        "__name__": "dynamo_frontend_requests_total",
        "model": "qwen3-32b",
        "k8s_node_name": "gpu-node-3",
        "instance": "dynamo-frontend-7d9f",
        "job": "dynamo/dynamo-frontend",
    }
    found = DEFAULTS.source_of(labels)
    assert found is not None
    assert found[0].place(labels) == SeriesPlace("dynamo", "gpu-node-3", None, "qwen3-32b", "qwen3-32b")


def test_dcgm_memory_families_are_read_for_the_gpus_size() -> None:
    """FB_FREE and FB_RESERVED give no catalog metric but the GPU's memory size: they are staged, not unmapped."""
    for name in ("DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_DEV_FB_USED"):
        found = DEFAULTS.source_of({"__name__": name, **DCGM})
        assert found is not None and found[0].name == "dcgm-exporter", name
