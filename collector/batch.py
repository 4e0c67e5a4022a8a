"""One node's batch as ingest holds it: the samples as columns of numbers, not an object per sample or per value.

Both encodings of ``POST /api/v1/ingest`` decode to a :class:`SampleBatch` (:mod:`collector.batch_decode`); the
writer builds its rows from the columns (:mod:`collector.sample_copy`), and the bounds that take samples out (pools
past the bound, too old) select rows with a mask. A sample's absent metric is NaN in ``values`` — NaN never gets in
from outside: both decoders refuse it — and ``NO_DEVICE`` / ``NO_POOL_INDEX`` stand for no device and no pool.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numpy.typing import NDArray
from pydantic import JsonValue

from wire.catalog import METRIC_NAMES
from wire.control import NodeReport
from wire.samples import IngestBatch, WireInventory

NO_DEVICE = -1
NO_POOL_INDEX = -1
METRIC_COUNT = len(METRIC_NAMES)

Extras = dict[int, dict[str, JsonValue]]


@dataclass(frozen=True, eq=False)
class SampleBatch:
    """A node's samples: row ``i`` is ``seq[i]``, ``ts[i]``, ``device[i]`` (``NO_DEVICE``), the pool
    ``pools[pool[i]]`` (``NO_POOL_INDEX``: none), ``values[i]`` in catalog order (NaN: absent) and ``extras.get(i)``."""

    node_id: str
    seq: NDArray[np.int64]
    ts: NDArray[np.float64]
    device: NDArray[np.int32]
    pool: NDArray[np.int32]
    values: NDArray[np.float64]  # shape (rows, METRIC_COUNT)
    pools: tuple[str, ...] = ()
    extras: Extras = field(default_factory=dict)
    report: NodeReport | None = None
    inventory: WireInventory | None = None

    def __len__(self) -> int:
        return len(self.seq)

    def pool_of(self, row: int) -> str | None:
        index = int(self.pool[row])
        return None if index == NO_POOL_INDEX else self.pools[index]

    def pools_named(self) -> list[str]:
        """The pools the samples name, each once, in order of first appearance."""
        used = np.unique(self.pool[self.pool != NO_POOL_INDEX], return_index=True)
        first = sorted(zip(used[1].tolist(), used[0].tolist(), strict=True))
        return [self.pools[index] for _, index in first]

    def take(self, keep: NDArray[np.bool_]) -> SampleBatch:
        """The batch with only the rows where ``keep`` is true (extras renumbered)."""
        kept = np.flatnonzero(keep)
        renumber = {int(old): new for new, old in enumerate(kept.tolist())}
        extras = {renumber[i]: e for i, e in self.extras.items() if i in renumber}
        return replace(
            self,
            seq=self.seq[kept],
            ts=self.ts[kept],
            device=self.device[kept],
            pool=self.pool[kept],
            values=self.values[kept],
            extras=extras,
        )

    def with_report(self, report: NodeReport | None) -> SampleBatch:
        return replace(self, report=report)

    @classmethod
    def parse(cls, body: dict[str, Any]) -> SampleBatch:
        """A body shaped as the JSON of ``POST /api/v1/ingest``, through the wire model (a job, a bench or a test
        standing in for an agent); no rule that needs ``now`` is checked."""
        return cls.from_wire(IngestBatch.model_validate(body))

    @classmethod
    def from_wire(cls, batch: IngestBatch) -> SampleBatch:
        """The columns of a batch parsed by the wire model (``wire.samples.parse_batch``, or a test's own)."""
        pools: dict[str, int] = {}
        count = len(batch.samples)
        values = np.full((count, METRIC_COUNT), np.nan)
        for row, sample in enumerate(batch.samples):
            for column, name in enumerate(METRIC_NAMES):
                value = getattr(sample.metrics, name)
                if value is not None:
                    values[row, column] = value
        return cls(
            node_id=batch.node_id,
            seq=np.array([s.seq for s in batch.samples], dtype=np.int64),
            ts=np.array([s.ts for s in batch.samples], dtype=np.float64),
            device=np.array([NO_DEVICE if s.device is None else s.device for s in batch.samples], dtype=np.int32),
            pool=np.array(
                [NO_POOL_INDEX if s.pool is None else pools.setdefault(s.pool, len(pools)) for s in batch.samples],
                dtype=np.int32,
            ),
            values=values,
            pools=tuple(pools),
            extras={row: dict(s.extra) for row, s in enumerate(batch.samples) if s.extra},
            report=batch.report,
            inventory=batch.inventory,
        )
