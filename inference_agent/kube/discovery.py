"""Pod discovery put together: the pod watch feeds the discovered engines, and each change of them (and every
10 s) the GPU probe asks the kubelet again who holds which GPU."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from inference_agent.kube.api_client import KubeApi
from inference_agent.kube.discovered_engines import DiscoveredEngines
from inference_agent.kube.gpu_attribution import REFRESH_S, AttributedGpuProbe
from inference_agent.kube.pod_resources import PodResourcesClient
from inference_agent.kube.pod_scope import PodScope
from inference_agent.kube.pod_watch import PodWatch
from inference_agent.probes.base import GpuProbe


def discover_pods(
    api: KubeApi,
    node: str,
    gpu: GpuProbe | None,
    *,
    scope: PodScope,
    pod_resources_socket: Path,
    scrape_interval_s: float,
    reserved_pools: Collection[str] = (),
    refresh_s: float = REFRESH_S,
) -> tuple[DiscoveredEngines, GpuProbe | None]:
    """The probe of the engines ``node``'s pods in ``scope`` run (already following them) and ``gpu`` with its rows
    attributed to the pods that hold each GPU (None stays None: no GPU, nothing to attribute)."""
    engines = DiscoveredEngines(scrape_interval_s, reserved_pools=reserved_pools)
    attributed: AttributedGpuProbe | None = None
    if gpu is not None:
        attributed = AttributedGpuProbe(
            gpu, PodResourcesClient(pod_resources_socket), engines.pools_by_pod, refresh_s=refresh_s
        )
        engines.on_found(attributed.refresh)
    engines.follow(PodWatch(api, node, engines.update, scope=scope))
    return engines, attributed if attributed is not None else gpu
