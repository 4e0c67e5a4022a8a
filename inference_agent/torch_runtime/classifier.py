"""The image classification engine: a small CNN on 3×64×64 inputs, with callers' images batched together."""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass

import torch
from torch import nn

from inference_agent.torch_runtime.api import Classification, EngineStats
from inference_agent.torch_runtime.model import pick_device

IMAGE_SHAPE = (3, 64, 64)

Images = Sequence[Sequence[Sequence[Sequence[float]]]] | torch.Tensor


class SmallCnn(nn.Module):
    """Three stride-2 convolutions (64 → 32 → 16 → 8 pixels), global average pooling, a linear head."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )  # fmt: skip
        self.head = nn.Linear(64, num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.head(self.features(images))
        return logits


def build_cnn(seed: int, device: torch.device, num_classes: int = 10) -> SmallCnn:
    """Deterministic weights: N(0, 2/fan_in) (He) for every weight, zero biases, from ``seed``."""
    model = SmallCnn(num_classes)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.zero_()
            else:
                fan_in = math.prod(param.shape[1:])
                param.normal_(0.0, math.sqrt(2.0 / fan_in), generator=generator)
    return model.to(device).eval()


def to_batch(images: Images) -> torch.Tensor:
    """Validate callers' images into one float tensor [N, 3, 64, 64]; a ValueError names what is wrong."""
    if isinstance(images, torch.Tensor):
        batch = images.detach().to(torch.float32, copy=False)
    else:
        for i, image in enumerate(images):
            _check_nested_shape(image, f"inputs[{i}]")
        try:
            batch = torch.tensor([list(image) for image in images], dtype=torch.float32).reshape(-1, *IMAGE_SHAPE)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"inputs must hold numbers only: {exc}") from None
    if batch.dim() != 4 or tuple(batch.shape[1:]) != IMAGE_SHAPE:
        raise ValueError(f"inputs must be shaped [N, 3, 64, 64], got {list(batch.shape)}")
    if batch.numel() and not (torch.isfinite(batch).all() and batch.min() >= 0 and batch.max() <= 1):
        raise ValueError("inputs must be finite values within 0..1")
    return batch


def _check_nested_shape(image: object, where: str) -> None:
    """3 channels of 64 rows of 64 values: "inputs[2] has 4 channels", "inputs[0][1][5] has 63 values"."""
    if not isinstance(image, Sequence) or len(image) != IMAGE_SHAPE[0]:
        raise ValueError(f"{where} must have {IMAGE_SHAPE[0]} channels, got {_length(image)}")
    for c, channel in enumerate(image):
        if not isinstance(channel, Sequence) or len(channel) != IMAGE_SHAPE[1]:
            raise ValueError(f"{where}[{c}] must have {IMAGE_SHAPE[1]} rows, got {_length(channel)}")
        for r, row in enumerate(channel):
            if not isinstance(row, Sequence) or len(row) != IMAGE_SHAPE[2]:
                raise ValueError(f"{where}[{c}][{r}] must have {IMAGE_SHAPE[2]} values, got {_length(row)}")


def _length(value: object) -> str:
    return str(len(value)) if isinstance(value, Sequence) else type(value).__name__


@dataclass
class _Job:
    batch: torch.Tensor
    result: Future[list[Classification]]


class BatchingClassifier:
    """An ``ImageClassifier``: a worker thread gathers callers' images, waiting up to ``batch_timeout_s`` after the
    first one for up to ``max_batch_size`` images, and classifies them in one forward pass."""

    def __init__(
        self, *, seed: int = 0, device: str | None = None, max_batch_size: int = 32, batch_timeout_s: float = 0.005
    ) -> None:
        self.device = pick_device(device)
        self.model = build_cnn(seed, self.device)
        self.max_batch_size, self.batch_timeout_s = max_batch_size, batch_timeout_s
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._in_flight = 0
        self._finished = 0

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="BatchingClassifier", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._jobs.put(None)
            self._thread.join()
            self._thread = None

    def warm_up(self) -> None:
        self._run(torch.zeros((1, *IMAGE_SHAPE)))

    def classify(self, images: Images) -> list[Classification]:
        """Classify ``images`` (blocking); without ``start()`` they run at once in the caller's thread."""
        batch = to_batch(images)
        if not len(batch):
            return []
        if self._thread is None:
            return self._run(batch)
        job = _Job(batch, Future())
        with self._lock:
            self._in_flight += 1
        self._jobs.put(job)
        return job.result.result()

    def stats(self) -> EngineStats:
        """Queue figures only: the classifier has no KV cache (kv_blocks_total 0 → utilization None)."""
        with self._lock:
            in_flight, finished = self._in_flight, self._finished
        return EngineStats(in_flight, 0, 0, 0, 0, 0.0, 0, 0, 0, 0, finished)

    def _run(self, batch: torch.Tensor) -> list[Classification]:
        with torch.inference_mode():
            probabilities = self.model(batch.to(self.device)).softmax(dim=-1)
            scores, labels = probabilities.max(dim=-1)
        return [Classification(int(lab), float(s)) for lab, s in zip(labels.tolist(), scores.tolist(), strict=True)]

    def _loop(self) -> None:
        while (first := self._jobs.get()) is not None:
            jobs = self._gather(first)
            try:
                results = self._run(torch.cat([j.batch for j in jobs]))
            except Exception as exc:  # one bad batch fails its callers, not the worker
                for job in jobs:
                    job.result.set_exception(exc)
            else:
                start = 0
                for job in jobs:
                    job.result.set_result(results[start : start + len(job.batch)])
                    start += len(job.batch)
            with self._lock:
                self._in_flight -= len(jobs)
                self._finished += len(jobs)

    def _gather(self, first: _Job) -> list[_Job]:
        """``first`` plus the jobs arriving within the timeout, up to the max batch (a job is never split)."""
        jobs, images = [first], len(first.batch)
        deadline = time.monotonic() + self.batch_timeout_s
        while images < self.max_batch_size and (left := deadline - time.monotonic()) > 0:
            try:
                job = self._jobs.get(timeout=left)
            except queue.Empty:
                break
            if job is None:
                self._jobs.put(None)  # stop after this batch
                break
            jobs.append(job)
            images += len(job.batch)
        return jobs
