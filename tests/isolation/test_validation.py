"""Quota checks, pure: what cannot hold is refused with the field at fault and by how much; memory in MPS steps."""

from __future__ import annotations

import pytest

from isolation.tenants import QuotaSpec
from isolation.validation import QuotaConflict, check_quotas
from wire.control import SloClass

H100_MIB = 81_559  # what NVML reports for an 80 GB H100


@pytest.mark.parametrize(
    ("asked", "stored"), [(1, 128), (127, 128), (128, 128), (129, 256), (1000, 1024), (40_000, 40_064)]
)
def test_gpu_memory_is_rounded_up_to_the_128_mib_step_mps_enforces(asked: int, stored: int) -> None:
    assert QuotaSpec(gpu_memory_mib=asked).gpu_memory_mib == stored


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"gpu_memory_mib": 0}, "gpu_memory_mib"),
        ({"active_thread_percentage": 0}, "active_thread_percentage"),
        ({"active_thread_percentage": 101}, "active_thread_percentage"),
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"rate_rps": 0.0}, "rate_rps"),
        ({"rate_rps": float("nan")}, "rate_rps"),
        ({"tokens_per_second": -5.0}, "tokens_per_second"),
    ],
)
def test_a_quota_out_of_range_names_its_field(fields: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=f"^{field}: "):
        QuotaSpec(**fields)  # type: ignore[arg-type]


def test_memory_past_the_smallest_gpu_says_by_how_much() -> None:
    quotas = {("acme", "chat"): QuotaSpec(gpu_memory_mib=49_152), ("globex", "chat"): QuotaSpec(gpu_memory_mib=40_960)}
    classes = {"acme": SloClass.LATENCY_CRITICAL, "globex": SloClass.BATCH}
    with pytest.raises(QuotaConflict) as caught:
        check_quotas(quotas, classes, {"chat": H100_MIB})
    assert caught.value.field == "gpu_memory_mib"
    assert str(caught.value) == (
        "gpu_memory_mib: tenants of pool chat would pin 90,112 MiB on a GPU of 81,559 MiB (8,553 MiB too much)"
    )


def test_memory_counts_every_class_and_fits_exactly() -> None:
    quotas = {("a", "chat"): QuotaSpec(gpu_memory_mib=40_960), ("b", "chat"): QuotaSpec(gpu_memory_mib=40_960)}
    check_quotas(quotas, {"a": SloClass.BATCH, "b": SloClass.BATCH}, {"chat": 81_920})
    with pytest.raises(QuotaConflict, match=r"\(128 MiB too much\)"):
        check_quotas(quotas, {"a": SloClass.BATCH, "b": SloClass.BATCH}, {"chat": 81_792})


def test_memory_is_not_checked_where_no_gpu_is_known() -> None:
    check_quotas({("a", "chat"): QuotaSpec(gpu_memory_mib=10**6)}, {"a": SloClass.STANDARD}, {})


@pytest.mark.parametrize(
    ("classes", "excess"),
    [
        ((SloClass.LATENCY_CRITICAL, SloClass.STANDARD, SloClass.BATCH), 20),
        ((SloClass.LATENCY_CRITICAL, SloClass.LATENCY_CRITICAL, SloClass.BATCH), 20),
        ((SloClass.STANDARD, SloClass.STANDARD, SloClass.STANDARD), 80),
        ((SloClass.LATENCY_CRITICAL, SloClass.BATCH, SloClass.BATCH), None),
    ],
)
def test_guaranteed_thread_shares_may_not_pass_100(
    classes: tuple[SloClass, SloClass, SloClass], excess: int | None
) -> None:
    names = ("a", "b", "c")
    quotas = {(name, "chat"): QuotaSpec(active_thread_percentage=60) for name in names}
    if excess is None:  # batch is best-effort: 60 guaranteed + 120 best-effort holds
        check_quotas(quotas, dict(zip(names, classes, strict=True)), {})
        return
    with pytest.raises(QuotaConflict) as caught:
        check_quotas(quotas, dict(zip(names, classes, strict=True)), {})
    assert caught.value.field == "active_thread_percentage"
    assert f"of pool chat would take {100 + excess}% " in str(caught.value)
    assert str(caught.value).endswith(f"past 100% by {excess} percentage points")


def test_pools_are_checked_apart_and_the_first_by_name_is_reported() -> None:
    quotas = {
        ("a", "chat"): QuotaSpec(active_thread_percentage=70),
        ("b", "embed"): QuotaSpec(active_thread_percentage=70),  # another pool: 70 + 70 never meet
        ("a", "zeta"): QuotaSpec(gpu_memory_mib=2048),
        ("b", "zeta"): QuotaSpec(gpu_memory_mib=2048),
        ("a", "beta"): QuotaSpec(gpu_memory_mib=1024),
        ("b", "beta"): QuotaSpec(gpu_memory_mib=2048),
    }
    classes = {"a": SloClass.STANDARD, "b": SloClass.STANDARD}
    with pytest.raises(QuotaConflict, match="pool beta would pin 3,072 MiB on a GPU of 2,048 MiB"):
        check_quotas(quotas, classes, {"zeta": 2048, "beta": 2048, "chat": 2048, "embed": 2048})
