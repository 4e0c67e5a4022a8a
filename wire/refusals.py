"""Samples an ingest refuses one by one while it stores the rest of their batch, as the answer names them.

A sample that breaks the wire format refuses its whole request (422, ``InvalidBatch``); one that is well formed but
past a bound of its node (a pool beyond ``ingest_max_pools_per_node``, a ``ts`` older than
``ingest_max_sample_age_seconds``) is left out alone: refusing the batch would refuse the node's good samples with it,
push after push, and the node would show down. The agent counts these as delivered (its spool moves on).
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field


class RefusalReason(StrEnum):
    TOO_MANY_POOLS = "too_many_pools"
    TOO_OLD = "too_old"


class Refusal(BaseModel):
    """``samples`` of one batch not stored for ``reason``; ``detail`` names the bound and its value, ``pools`` the
    pools refused (``too_many_pools``)."""

    model_config = ConfigDict(frozen=True)

    reason: str  # a RefusalReason; read as text, so an agent takes the reasons of a newer server
    samples: int = Field(ge=0)
    detail: str
    pools: list[str] = Field(default_factory=list)
