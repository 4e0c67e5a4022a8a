"""A sample has one shape: the JSON the agent builds and spools (``SampleJson``) is what the collector's
``WireSample`` parses, field for field, required for required."""

from __future__ import annotations

import json
from typing import NotRequired, get_origin, get_type_hints

from wire.samples import SampleJson, UnsequencedSampleJson, WireSample, parse_batch


def required_keys(typed: type) -> set[str]:
    """The keys a TypedDict requires (its ``__required_keys__`` cannot see ``NotRequired`` under postponed
    annotations before Python 3.14)."""
    hints = get_type_hints(typed, include_extras=True)
    return {name for name, hint in hints.items() if get_origin(hint) is not NotRequired}


def test_the_agents_sample_json_has_the_wire_samples_fields() -> None:
    assert set(get_type_hints(SampleJson)) == set(WireSample.model_fields)
    assert required_keys(SampleJson) == {name for name, f in WireSample.model_fields.items() if f.is_required()}


def test_only_seq_is_added_by_the_spool() -> None:
    assert set(get_type_hints(SampleJson)) - set(get_type_hints(UnsequencedSampleJson)) == {"seq"}
    assert required_keys(SampleJson) - required_keys(UnsequencedSampleJson) == {"seq"}


def test_the_fewest_keys_a_sample_json_may_hold_parse_as_a_wire_sample() -> None:
    sample: SampleJson = {"ts": 1_764_424_800.5, "metrics": {"gpu_utilization_ratio": None}, "seq": 1}
    body = json.dumps({"node_id": "node-a", "samples": [sample]}).encode()
    batch = parse_batch(body, now=1_764_424_800.0, max_samples=10, max_future_seconds=300, max_replicas=256)
    assert batch.samples[0].seq == 1
    assert batch.samples[0].device is None
    assert batch.samples[0].extra == {}
