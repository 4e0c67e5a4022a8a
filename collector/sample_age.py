"""How far back an agent's sample may be (``ingest_max_sample_age_seconds``, by default the raw retention window):
older ones are refused one by one, the rest of the batch stored.

Without it, one push of 20,000 samples a minute apart back 13 days put 20,000 (node, minute) pairs in the rollup
backlog, each re-rolled from raw samples that retention had already deleted: a full minute's rollup replaced by one
sample's.
"""

from __future__ import annotations

from collector.batch import SampleBatch
from wire.refusals import Refusal, RefusalReason


def without_old_samples(batch: SampleBatch, *, now: float, max_age_s: float) -> tuple[SampleBatch, Refusal | None]:
    """``batch`` without its samples whose ``ts`` is before ``now - max_age_s``, and what was refused (None: none)."""
    kept = batch.ts >= now - max_age_s
    refused = len(batch) - int(kept.sum())
    if not refused:
        return batch, None
    refusal = Refusal(
        reason=RefusalReason.TOO_OLD,
        samples=refused,
        detail=f"{refused} samples older than ingest_max_sample_age_seconds ({max_age_s:.0f} s) not stored",
    )
    return batch.take(kept), refusal
