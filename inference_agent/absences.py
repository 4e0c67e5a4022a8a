"""Why this node's readings lack catalog metrics, for its report (``NodeReport.absent``): the reason the GPU probe
could not start, and per pool what its engines do not give. The same reasons the agent logs and serves on its
``/metrics`` (``fleetpilot_agent_gpu_probe_info``, ``fleetpilot_agent_engine_metric_absent``), so the fleet page
says "no GPU (NVML Shared Library Not Found)" where it would otherwise show a bare dash."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from inference_agent.telemetry import EngineAbsences
from wire.control import MAX_ABSENCE_REASON_CHARS, MAX_POOLS, MetricAbsences

NO_GPU_PROBE = "no GPU probe configured"


def reason_text(reason: str) -> str:
    """A reason as the wire takes it: never empty, at most ``MAX_ABSENCE_REASON_CHARS`` (an NVML error can run on)."""
    text = reason.strip() or "no reason given"
    if len(text) <= MAX_ABSENCE_REASON_CHARS:
        return text
    return text[: MAX_ABSENCE_REASON_CHARS - 1] + "…"


def metric_absences(gpu_absent: str | None, engines: Iterable[EngineAbsences]) -> MetricAbsences:
    """``gpu_absent``: why no GPU probe runs (None while one does). A pool's metric is absent only when every engine
    read for that pool lacks it: two replicas, one of them with a KV-cache gauge, give the pool its KV-cache figure.

    Worked: a TGI replica and a vLLM replica of ``chat`` → only the metrics both lack, with the TGI probe's reason
    (engines are taken in URL order, the first reason wins)."""
    per_pool: dict[str, list[Mapping[str, str]]] = {}
    for engine in sorted(engines, key=lambda e: (e.pool, e.url)):
        per_pool.setdefault(engine.pool, []).append(engine.absent())
    pools: dict[str, dict[str, str]] = {}
    for pool, absences in sorted(per_pool.items())[:MAX_POOLS]:
        lacking = set.intersection(*(set(a) for a in absences))
        first = {name: reason for a in reversed(absences) for name, reason in a.items()}
        if lacking:
            pools[pool] = {name: reason_text(first[name]) for name in sorted(lacking)}
    gpu = reason_text(gpu_absent) if gpu_absent is not None else None
    return MetricAbsences(gpu=gpu, pools=pools)
