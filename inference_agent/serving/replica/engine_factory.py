"""Which engine a replica runs: the torch engines of ``inference_agent.torch_runtime`` or the in-repo fakes.

torch is imported here only when a torch engine is built, so the front end and the supervisor never load it.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from inference_agent.serving.replica.fake_engine import FakeClassifier, FakeTextEngine
from inference_agent.serving.supervision.quota import CPUS_ENV, THREADS_ENV, parse_cpus
from inference_agent.torch_runtime.api import ImageClassifier, TextEngine

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineOptions:
    kind: str  # "text" | "classify"
    engine: str  # "torch" | "fake"
    seed: int = 0
    device: str = "cpu"
    threads: int | None = None
    token_delay_s: float = 0.002
    ignore_eos: bool = False  # generate exactly max_tokens (benchmarks' fixed output lengths)


def pin_to_quota() -> int | None:
    """Apply the CPU affinity the supervisor chose (``FLEETPILOT_REPLICA_CPUS``); answer the thread count."""
    cpus = os.environ.get(CPUS_ENV)
    if cpus and hasattr(os, "sched_setaffinity"):
        try:
            os.sched_setaffinity(0, parse_cpus(cpus))
        except (OSError, ValueError) as exc:
            log.warning("cannot pin to CPUs %s: %s", cpus, exc)
    threads = os.environ.get(THREADS_ENV)
    return int(threads) if threads and threads.isdigit() and int(threads) > 0 else None


def _torch_ready(options: EngineOptions) -> None:
    import torch

    if options.threads is not None:
        torch.set_num_threads(options.threads)
    torch.manual_seed(options.seed)


def build_text_engine(options: EngineOptions) -> TextEngine:
    if options.engine == "fake":
        return FakeTextEngine(token_delay_s=options.token_delay_s)
    _torch_ready(options)
    from inference_agent.torch_runtime.config import ModelConfig
    from inference_agent.torch_runtime.engine import ContinuousBatchingEngine, EngineConfig

    config = EngineConfig(model=ModelConfig(seed=options.seed), device=options.device, ignore_eos=options.ignore_eos)
    return ContinuousBatchingEngine(config)


def build_classifier(options: EngineOptions) -> ImageClassifier:
    if options.engine == "fake":
        return FakeClassifier(batch_delay_s=options.token_delay_s)
    _torch_ready(options)
    from inference_agent.torch_runtime.classifier import BatchingClassifier

    return BatchingClassifier(seed=options.seed, device=options.device)
