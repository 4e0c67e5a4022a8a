"""The host probe with a stand-in psutil and a fake clock: rates over the interval, absent (never 0) without one."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple

import pytest

from inference_agent.probes.host import HostCounters, HostProbe, interval_figures
from tests.support.clock import FakeClock


class Nic(NamedTuple):
    bytes_sent: int = 0
    bytes_recv: int = 0
    packets_sent: int = 0
    packets_recv: int = 0
    errin: int = 0
    errout: int = 0
    dropin: int = 0
    dropout: int = 0


class Disk(NamedTuple):
    read_count: int = 0
    write_count: int = 0
    read_time: int = 0
    write_time: int = 0


class CpuTimes(NamedTuple):
    user: float = 0.0
    system: float = 0.0
    idle: float = 0.0
    iowait: float = 0.0


class Memory(NamedTuple):
    total: int
    used: int


class DiskUsage(NamedTuple):
    total: int
    used: int
    free: int


@dataclass
class FakePsutil:
    """psutil's counters as plain numbers; ``broken`` names calls that raise OSError."""

    nics: dict[str, Nic] = field(default_factory=lambda: {"lo": Nic(), "eth0": Nic()})
    disk: Disk | None = field(default_factory=Disk)
    cpu: CpuTimes = field(default_factory=CpuTimes)
    memory: Memory = field(default_factory=lambda: Memory(total=64 << 30, used=24 << 30))
    usage: DiskUsage = field(default_factory=lambda: DiskUsage(total=105 << 30, used=40 << 30, free=60 << 30))
    broken: set[str] = field(default_factory=set)
    usage_paths: list[str] = field(default_factory=list)

    def _check(self, name: str) -> None:
        if name in self.broken:
            raise OSError(f"[Errno 5] {name} failed")

    def net_io_counters(self, pernic: Literal[True]) -> dict[str, Nic]:
        self._check("net_io_counters")
        return dict(self.nics)

    def disk_io_counters(self) -> Disk | None:
        self._check("disk_io_counters")
        return self.disk

    def cpu_times(self) -> CpuTimes:
        self._check("cpu_times")
        return self.cpu

    def virtual_memory(self) -> Memory:
        self._check("virtual_memory")
        return self.memory

    def disk_usage(self, path: str) -> DiskUsage:
        self._check("disk_usage")
        self.usage_paths.append(path)
        return self.usage


def probe_with(psutil: FakePsutil, clock: FakeClock) -> HostProbe:
    return HostProbe("/var/lib/fleetpilot", psutil=psutil, clock=clock)


def test_the_first_read_has_no_throughput_but_the_gauges() -> None:
    psutil = FakePsutil()
    [reading] = probe_with(psutil, FakeClock()).read()
    assert reading.metrics == {}  # no previous counters: absent, never 0
    assert reading.device is None and reading.pool is None and reading.error is None
    assert reading.extra == {
        "host_memory_used_bytes": 24 << 30,
        "host_memory_total_bytes": 64 << 30,
        "host_data_disk_usage_ratio": 0.4,  # 40 GiB used of 100 GiB usable (5 GiB reserved for root left out)
    }
    assert psutil.usage_paths == ["/var/lib/fleetpilot"]


# (rx bytes delta, tx bytes delta, seconds between reads, expected bytes per second)
THROUGHPUT = [
    (3_000_000, 1_000_000, 0.5, 8_000_000.0),
    (0, 0, 0.5, 0.0),
    (1_250, 0, 0.25, 5_000.0),
    (10**12, 10**12, 2.0, 10**12),
]


@pytest.mark.parametrize(("rx", "tx", "elapsed", "expected"), THROUGHPUT)
def test_the_second_read_has_exactly_delta_over_elapsed(rx: int, tx: int, elapsed: float, expected: float) -> None:
    psutil, clock = FakePsutil(nics={"eth0": Nic(bytes_sent=500, bytes_recv=7_000)}), FakeClock()
    probe = probe_with(psutil, clock)
    probe.read()
    psutil.nics = {"eth0": Nic(bytes_sent=500 + tx, bytes_recv=7_000 + rx)}
    clock.advance(elapsed)
    [reading] = probe.read()
    assert reading.metrics == {"network_throughput_bytes_per_second": expected}


def test_loopback_is_left_out_and_every_other_nic_counts() -> None:
    psutil, clock = FakePsutil(nics={"lo": Nic(), "lo0": Nic(), "eth0": Nic(), "ib0": Nic()}), FakeClock()
    probe = probe_with(psutil, clock)
    probe.read()
    busy_loopback = Nic(bytes_sent=10**9, bytes_recv=10**9)
    psutil.nics = {"lo": busy_loopback, "lo0": busy_loopback, "eth0": Nic(bytes_recv=600), "ib0": Nic(bytes_sent=400)}
    clock.advance(0.5)
    assert probe.read()[0].metrics["network_throughput_bytes_per_second"] == 2_000.0  # (600 + 400) / 0.5


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [
        ({"eth0": Nic(bytes_recv=100)}, {"eth0": Nic(bytes_recv=600), "eth1": Nic(bytes_recv=10**9)}, 1_000.0),
        (
            {"eth0": Nic(bytes_recv=10**9), "eth1": Nic()},
            {"eth0": Nic(bytes_recv=5), "eth1": Nic(bytes_sent=50)},
            100.0,
        ),
        ({"eth0": Nic(bytes_recv=10**9)}, {"eth0": Nic(bytes_recv=5)}, None),
        ({"lo": Nic()}, {"lo": Nic(bytes_recv=10**6)}, None),
    ],
    ids=["new-nic-has-no-baseline", "reset-nic-is-skipped", "nothing-comparable-is-absent", "only-loopback"],
)
def test_nics_without_a_baseline_are_left_out(
    before: dict[str, Nic], after: dict[str, Nic], expected: float | None
) -> None:
    psutil, clock = FakePsutil(nics=before), FakeClock()
    probe = probe_with(psutil, clock)
    probe.read()
    psutil.nics = after
    clock.advance(0.5)
    assert probe.read()[0].metrics.get("network_throughput_bytes_per_second") == expected


def test_nic_errors_drops_and_packet_loss_are_interval_deltas() -> None:
    psutil, clock = FakePsutil(nics={"eth0": Nic(packets_recv=1_000, errin=7, dropin=3)}), FakeClock()
    probe = probe_with(psutil, clock)
    probe.read()
    psutil.nics = {"eth0": Nic(packets_sent=300, packets_recv=1_695, errin=9, errout=1, dropin=7, dropout=1)}
    clock.advance(0.5)
    extra = probe.read()[0].extra
    assert (extra["host_nic_errors_in"], extra["host_nic_errors_out"]) == (2, 1)
    assert (extra["host_nic_drops_in"], extra["host_nic_drops_out"]) == (4, 1)
    assert extra["host_nic_packet_loss_ratio"] == 5 / 1_000  # 5 dropped beside 995 carried


# (disk counters before, after, expected ms per operation or None)
DISK_LATENCY = [
    (Disk(10, 10, 100, 100), Disk(16, 16, 112, 118), 2.5),  # 30 ms busy over 12 ops
    (Disk(10, 10, 100, 100), Disk(10, 10, 100, 100), None),  # no I/O: absent, not 0 ms
    (Disk(0, 0, 0, 0), Disk(1, 0, 8, 0), 8.0),
    (Disk(10, 10, 100, 100), None, None),  # a host without disks
]


@pytest.mark.parametrize(("before", "after", "expected"), DISK_LATENCY)
def test_disk_io_latency_is_busy_time_per_operation(before: Disk, after: Disk | None, expected: float | None) -> None:
    psutil, clock = FakePsutil(disk=before), FakeClock()
    probe = probe_with(psutil, clock)
    probe.read()
    psutil.disk = after
    clock.advance(0.5)
    assert probe.read()[0].extra.get("host_disk_io_latency_ms") == expected


def test_cpu_use_is_busy_over_total_time() -> None:
    psutil, clock = FakePsutil(cpu=CpuTimes(user=100.0, system=50.0, idle=800.0, iowait=50.0)), FakeClock()
    probe = probe_with(psutil, clock)
    assert "host_cpu_ratio" not in probe.read()[0].extra
    # +1.0 user, +0.5 system, +0.4 idle, +0.1 iowait: 1.5 busy CPU-seconds of 2.0
    psutil.cpu = CpuTimes(user=101.0, system=50.5, idle=800.4, iowait=50.1)
    clock.advance(1.0)
    assert probe.read()[0].extra["host_cpu_ratio"] == pytest.approx(0.75, abs=1e-9)


def test_a_failing_counter_is_reported_and_the_others_go_on() -> None:
    psutil, clock = FakePsutil(), FakeClock()
    probe = probe_with(psutil, clock)
    probe.read()
    psutil.broken = {"net_io_counters", "disk_usage"}
    clock.advance(0.5)
    [reading] = probe.read()
    assert reading.metrics == {}
    assert (
        reading.error
        == "psutil.net_io_counters: [Errno 5] net_io_counters failed; psutil.disk_usage: [Errno 5] disk_usage failed"
    )
    assert reading.extra["host_memory_total_bytes"] == 64 << 30
    assert "host_data_disk_usage_ratio" not in reading.extra
    psutil.broken = set()
    clock.advance(0.5)
    assert "network_throughput_bytes_per_second" not in probe.read()[0].metrics  # no baseline from the failed read
    clock.advance(0.5)
    assert probe.read()[0].metrics == {"network_throughput_bytes_per_second": 0.0}


def test_no_time_passed_gives_no_rates() -> None:
    counters = HostCounters(at=5.0, nics={"eth0": (1, 2, 3, 4, 0, 0, 0, 0)}, disk_ops=1, disk_busy_ms=1)
    assert interval_figures(counters, counters) == ({}, {})


def test_the_real_psutil_reads_this_host(tmp_path: Path) -> None:
    probe = HostProbe(tmp_path)
    first, second = probe.read()[0], probe.read()[0]
    assert first.metrics == {} and first.error is None
    assert second.metrics.get("network_throughput_bytes_per_second", 0.0) >= 0.0
    assert 0.0 <= second.extra["host_data_disk_usage_ratio"] <= 1.0
    assert second.extra["host_memory_total_bytes"] > 0
