"""The batching image classifier: shape validation, determinism, and callers' images batched together."""

from __future__ import annotations

import threading

import pytest
import torch

from inference_agent.torch_runtime.api import Classification
from inference_agent.torch_runtime.classifier import BatchingClassifier, to_batch


def images(count: int, seed: int = 0) -> torch.Tensor:
    return torch.rand((count, 3, 64, 64), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ([[[[0.0] * 64] * 64] * 4], r"inputs\[0\] must have 3 channels, got 4"),
        ([[[[0.0] * 64] * 63] * 3], r"inputs\[0\]\[0\] must have 64 rows, got 63"),
        (
            [[[[0.0] * 64] * 64] * 2 + [[[0.0] * 64] * 63 + [[0.0] * 5]]],
            r"inputs\[0\]\[2\]\[63\] must have 64 values, got 5",
        ),
        ([[[["x"] * 64] * 64] * 3], "numbers only"),
        ([7], r"inputs\[0\] must have 3 channels, got int"),
        (torch.zeros((2, 3, 32, 32)), r"\[N, 3, 64, 64\], got \[2, 3, 32, 32\]"),
        (torch.full((1, 3, 64, 64), 2.0), "within 0..1"),
    ],
)
def test_bad_inputs_name_what_is_wrong(bad: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        to_batch(bad)  # type: ignore[arg-type]


def test_nested_lists_and_tensors_classify_alike_and_deterministically() -> None:
    batch = images(3)
    first = BatchingClassifier(seed=3, device="cpu").classify(batch)
    again = BatchingClassifier(seed=3, device="cpu").classify(batch.tolist())
    assert [c.label for c in first] == [c.label for c in again]
    assert [c.score for c in first] == pytest.approx([c.score for c in again], abs=1e-6)
    assert all(0.0 < c.score <= 1.0 for c in first)
    assert BatchingClassifier(device="cpu").classify([]) == []


def test_concurrent_callers_share_batches() -> None:
    classifier = BatchingClassifier(device="cpu", max_batch_size=16, batch_timeout_s=0.05)
    classifier.warm_up()
    expected = [classifier.classify(images(2, seed=i)) for i in range(4)]
    classifier.start()
    results: dict[int, list[Classification]] = {}
    threads = [
        threading.Thread(target=lambda i=i: results.update({i: classifier.classify(images(2, seed=i))}))
        for i in range(4)
    ]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        classifier.stop()
    assert [[c.label for c in results[i]] for i in range(4)] == [[c.label for c in e] for e in expected]
    assert classifier.stats().finished_requests == 4 and classifier.stats().kv_utilization_ratio is None
