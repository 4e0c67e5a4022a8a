"""The wire format's rules that need ``now`` or more than one field (CONTRACT section 5), checked on a batch's
columns at once: ``ts`` too far ahead, a GPU metric without ``device``, a pool metric without ``pool``, the extras'
numbers and bounds, and the node's report (the one sent, or the one an agent before the report put in its pool
samples' extras). The wording is the wire model's (``wire.samples``), which checks the same one sample at a time.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from numpy.typing import NDArray

from collector.batch import NO_DEVICE, NO_POOL_INDEX, SampleBatch
from wire.catalog import METRIC_NAMES
from wire.control import NodeReport, PoolReport
from wire.errors import FieldProblem, InvalidBatch
from wire.samples import (
    GPU_METRIC_NEEDS_DEVICE,
    GPU_METRICS,
    LEGACY_REPORT_EXTRAS,
    POOL_METRIC_NEEDS_POOL,
    POOL_METRICS,
    extra_problems,
    future_ts_problem,
    legacy_pool_report,
    report_problems,
)

# A batch's problems named at most: a body of 20,000 bad samples gets the first of them and a count, not 20,000 lines.
PROBLEMS_NAMED = 100
_GPU_COLUMNS = [METRIC_NAMES.index(name) for name in GPU_METRICS]
_POOL_COLUMNS = [METRIC_NAMES.index(name) for name in POOL_METRICS]


def checked(batch: SampleBatch, *, now: float, max_future_seconds: float, max_replicas: int) -> SampleBatch:
    """``batch`` with its report settled (the legacy one built from extras); ``InvalidBatch`` names what breaks a
    rule, and then nothing of the batch is stored."""
    # sample by sample, as the wire model names them: sample 3's extra, ts and metrics before sample 4's
    problems = sorted(
        _sample_problems(batch, now=now, max_future_seconds=max_future_seconds, max_replicas=max_replicas),
        key=lambda problem: -1 if problem.sample is None else problem.sample,
    )
    if not problems:
        batch = batch.with_report(node_report(batch))
        if batch.report is not None:
            problems = list(
                report_problems(batch.report, now=now, max_future_seconds=max_future_seconds, max_replicas=max_replicas)
            )
    if problems:
        raise InvalidBatch(problems[:PROBLEMS_NAMED])
    return batch


def _sample_problems(
    batch: SampleBatch, *, now: float, max_future_seconds: float, max_replicas: int
) -> Iterator[FieldProblem]:
    for index, extra in sorted(batch.extras.items()):
        yield from extra_problems(index, extra, max_replicas)
    for index in _first(batch.ts > now + max_future_seconds):
        yield future_ts_problem(index, "ts", float(batch.ts[index]), now=now, max_future_seconds=max_future_seconds)
    present = ~np.isnan(batch.values)
    yield from _misplaced(present, batch.device == NO_DEVICE, _GPU_COLUMNS, GPU_METRIC_NEEDS_DEVICE)
    yield from _misplaced(present, batch.pool == NO_POOL_INDEX, _POOL_COLUMNS, POOL_METRIC_NEEDS_POOL)


def _misplaced(
    present: NDArray[np.bool_], lacking: NDArray[np.bool_], columns: list[int], message: str
) -> Iterator[FieldProblem]:
    """Each (sample, metric) carried by a sample that lacks what the metric needs."""
    wrong = present[:, columns] & lacking[:, None]
    rows, positions = np.nonzero(wrong)
    for row, position in zip(rows[:PROBLEMS_NAMED].tolist(), positions[:PROBLEMS_NAMED].tolist(), strict=True):
        yield FieldProblem(row, f"metrics.{METRIC_NAMES[columns[position]]}", message)


def _first(mask: NDArray[np.bool_]) -> list[int]:
    return [int(i) for i in np.flatnonzero(mask)[:PROBLEMS_NAMED]]


def node_report(batch: SampleBatch) -> NodeReport | None:
    """The node's report: the one it sent or, from an agent before the report (one release), the one its pool
    samples' extras make, each pool's newest sample carrying ``replicas_ready`` … ``tenants`` being its entry
    (``wire.samples.node_report`` reads the same from the wire model)."""
    if batch.report is not None:
        return batch.report
    newest: dict[str, int] = {}
    for index, extra in sorted(batch.extras.items()):
        pool = batch.pool_of(index)
        if pool is None or not any(key in extra for key in LEGACY_REPORT_EXTRAS):
            continue
        kept = newest.get(pool)
        if kept is None or batch.ts[index] >= batch.ts[kept]:
            newest[pool] = index
    if not newest:
        return None
    pools: dict[str, PoolReport] = {
        pool: legacy_pool_report(index, batch.extras[index]) for pool, index in newest.items()
    }
    return NodeReport(ts=max(float(batch.ts[index]) for index in newest.values()), pools=pools)
