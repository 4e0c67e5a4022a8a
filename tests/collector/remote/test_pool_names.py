"""A pool named after its model: a valid, stable, readable name for an engine's series without a pool label."""

from __future__ import annotations

import re

import pytest

from collector.remote.pool_names import pool_for_model
from wire.control import NAME_PATTERN


@pytest.mark.parametrize(
    ("model", "pool"),
    [
        ("llama-8b", "llama-8b"),  # already a pool name: kept
        ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama--Llama-3.1-8B-Instruct"),  # as the Hub's cache spells it
        ("Qwen/Qwen2.5-7B-Instruct", "Qwen--Qwen2.5-7B-Instruct"),
    ],
)
def test_a_hub_id_becomes_its_cache_spelling(model: str, pool: str) -> None:
    assert pool_for_model(model) == pool


@pytest.mark.parametrize(
    "model",
    [
        "/models/llama_3",  # a local path, as vLLM names a model served from disk
        "org/model_with_underscores",
        "a/b/c",
        "meta-llama--x/y",  # not a Hub id: it holds --
        "x" * 300,
        "/",
        "name with spaces\nand a newline",
        "é/ü",
    ],
)
def test_any_other_id_becomes_a_valid_name_with_its_hash(model: str) -> None:
    pool = pool_for_model(model)
    assert re.fullmatch(NAME_PATTERN, pool), pool
    assert re.search(r"-[0-9a-f]{8}$", pool), pool
    assert pool_for_model(model) == pool  # the same in every process and release


def test_ids_that_read_alike_get_different_names() -> None:
    """``a_b`` and ``a.b`` would both be ``a-b`` rewritten; ``a/b`` and a label ``a--b`` are the Hub's one model."""
    ids = ["org/a_b", "org/a.b", "org/a-b", "org/a b", "/org/a-b", "org/a/b", "ORG/a-b"]
    assert len({pool_for_model(m) for m in ids}) == len(ids)
