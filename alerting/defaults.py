"""The default rule pack: shipped enabled, seeded once into ``alert_rules`` and editable like any rule.

Each rule's ``action`` annotation says what to do. Pack 2 (issue 22): request latency is judged against each pool's
own SLO (a warning at 0.8 × its p99 SLO held 2 minutes, critical above it held 1 minute) instead of a fixed 500 ms
that a 10-s pool broke all day; every threshold rule keeps firing 5 minutes after its condition last held (one
quiet sample in a bad spell does not resolve and re-fire it); network latency warns at 50 ms p99 over 5 minutes
(what it measures is the agent's push round trip, which on a loaded collector is tens of ms with no network at
all). Pack 3, from replaying a recorded demo through it (tests/alerting/test_default_pack_on_demo.py; the review is
in docs/operations.md): network latency is judged on the *fastest* push of the window (the floor of the round trip:
a busy collector slows the tail of every node's pushes at once — 1 s p99 on loopback — while a slow path raises the
floor), held 5 minutes; and the two rules that had no hysteresis get one (SaturationPredicted held 1 minute and
kept 5, ScalingStuck kept 5), so a forecast wavering around 50 % does not fire and resolve every few cycles.
Two readings of the issue's wording, said here once:
"GPU utilization variance across a pool's nodes > 0.3" is the spread (max − min) of the nodes' utilization, since
the variance of a 0..1 ratio never exceeds 0.25; "network latency p99" is the p99 over 5 minutes of the agents'
push round trips (the 1-minute rollups' p99), 10 ms in pack 1 and 50 ms in pack 2; since pack 3 it is the minimum
round trip over 5 minutes above 50 ms.
"""

from __future__ import annotations

from alerting.rules import Aggregate, EventKind, GroupBy, Op, RuleKind, RuleSpec, Severity
from collector.aggregate import Stat

PACK_VERSION = 3
KEEP_FIRING_S = 300.0  # every threshold rule's hysteresis
# The pack version each rule joined in (1 when not listed): an upgrade adds only the rules newer than the pack a
# database has, so a shipped rule an operator deleted is not brought back.
ADDED_IN: dict[str, int] = {"p99_latency_near_slo": 2}


def _notes(summary: str, action: str) -> dict[str, str]:
    return {"summary": summary, "action": action}


DEFAULT_RULES: tuple[tuple[str, RuleSpec], ...] = (
    (
        "p99_latency_high",
        RuleSpec(
            name="P99LatencyAboveSlo",
            kind=RuleKind.THRESHOLD,
            severity=Severity.CRITICAL,
            metric="request_latency_p99_seconds",
            op=Op.GT,
            slo_ratio=1.0,
            for_seconds=60,
            keep_firing_seconds=KEEP_FIRING_S,
            annotations=_notes(
                "Request latency p99 above the pool's SLO",
                "Scale the pool out or re-route traffic away from this node; check its queue depth and KV cache.",
            ),
        ),
    ),
    (
        "p99_latency_near_slo",
        RuleSpec(
            name="P99LatencyNearSlo",
            kind=RuleKind.THRESHOLD,
            severity=Severity.WARNING,
            metric="request_latency_p99_seconds",
            op=Op.GT,
            slo_ratio=0.8,
            for_seconds=120,
            keep_firing_seconds=KEEP_FIRING_S,
            annotations=_notes(
                "Request latency p99 above 80 % of the pool's SLO",
                "Headroom is going: check the autoscaler is scaling out (or is at max_replicas) before the SLO breaks.",
            ),
        ),
    ),
    (
        "gpu_underused",
        RuleSpec(
            name="GpuUnderused",
            kind=RuleKind.THRESHOLD,
            severity=Severity.WARNING,
            metric="gpu_utilization_ratio",
            op=Op.LT,
            threshold=0.6,
            for_seconds=900,
            keep_firing_seconds=KEEP_FIRING_S,
            annotations=_notes(
                "GPU utilization below 60 % for 15 minutes (waste)",
                "Scale the pool in, or consolidate replicas onto fewer GPUs.",
            ),
        ),
    ),
    (
        "error_rate_high",
        RuleSpec(
            name="ErrorRateHigh",
            kind=RuleKind.THRESHOLD,
            severity=Severity.CRITICAL,
            metric="request_error_ratio",
            op=Op.GT,
            threshold=0.01,
            for_seconds=60,
            keep_firing_seconds=KEEP_FIRING_S,
            annotations=_notes(
                "More than 1 % of requests fail",
                "Re-route traffic away from the failing replicas and check the engine's log; roll back a bad deploy.",
            ),
        ),
    ),
    (
        "gpu_hot",
        RuleSpec(
            name="GpuTemperatureHigh",
            kind=RuleKind.THRESHOLD,
            severity=Severity.WARNING,
            metric="gpu_temperature_celsius",
            op=Op.GT,
            threshold=85,
            for_seconds=60,
            keep_firing_seconds=KEEP_FIRING_S,
            annotations=_notes(
                "GPU above 85 °C",
                "Schedule preventive maintenance: check fans, airflow and the rack; drain the node if it keeps rising.",
            ),
        ),
    ),
    (
        "ecc_errors",
        RuleSpec(
            name="GpuEccErrors",
            kind=RuleKind.RATE_OF_CHANGE,
            severity=Severity.WARNING,
            metric="gpu_ecc_volatile_corrected_errors",
            op=Op.GT,
            threshold=10,
            window_seconds=3600,
            annotations=_notes(
                "More than 10 ECC memory errors within an hour",
                "Schedule preventive maintenance: migrate the workload and data off this GPU, then have it checked.",
            ),
        ),
    ),
    (
        "gpu_imbalance",
        RuleSpec(
            name="PoolGpuImbalance",
            kind=RuleKind.THRESHOLD,
            severity=Severity.WARNING,
            metric="gpu_utilization_ratio",
            group_by=GroupBy.POOL,
            aggregate=Aggregate.SPREAD,
            op=Op.GT,
            threshold=0.3,
            for_seconds=300,
            keep_firing_seconds=KEEP_FIRING_S,
            annotations=_notes(
                "GPU utilization differs by more than 0.3 across the pool's nodes",
                "Re-balance routing weights or re-route traffic; look for a slow or throttled node.",
            ),
        ),
    ),
    (
        "network_latency_high",
        RuleSpec(
            name="NetworkLatencyHigh",
            kind=RuleKind.THRESHOLD,
            severity=Severity.WARNING,
            metric="network_latency_seconds",
            op=Op.GT,
            threshold=0.050,
            stat=Stat.MIN,
            window_seconds=300,
            for_seconds=300,  # a just-started agent's first minute (registration, imports) is slow: not a path
            keep_firing_seconds=KEEP_FIRING_S,
            annotations=_notes(
                "Even the fastest push round trip of 5 minutes took over 50 ms: the path itself is slow",
                "Re-route traffic to better-connected nodes; check the NIC, switch port and MTU.",
            ),
        ),
    ),
    (
        "packet_loss",
        RuleSpec(
            name="PacketLoss",
            kind=RuleKind.THRESHOLD,
            severity=Severity.WARNING,
            metric="host_nic_packet_loss_ratio",
            op=Op.GT,
            threshold=0.0001,
            for_seconds=120,
            keep_firing_seconds=KEEP_FIRING_S,
            annotations=_notes(
                "Packet loss above 0.01 %",
                "Re-route traffic away from the node; check cabling, the switch port and NIC ring buffers.",
            ),
        ),
    ),
    (
        "disk_latency",
        RuleSpec(
            name="DiskLatencyHigh",
            kind=RuleKind.THRESHOLD,
            severity=Severity.WARNING,
            metric="host_disk_io_latency_ms",
            op=Op.GT,
            threshold=50,
            for_seconds=300,
            keep_firing_seconds=KEEP_FIRING_S,
            annotations=_notes(
                "Disk I/O latency above 50 ms",
                "Migrate model data to faster storage; schedule maintenance if the disk is failing.",
            ),
        ),
    ),
    (
        "disk_full",
        RuleSpec(
            name="DiskUsageHigh",
            kind=RuleKind.THRESHOLD,
            severity=Severity.WARNING,
            metric="host_data_disk_usage_ratio",
            op=Op.GT,
            threshold=0.85,
            for_seconds=300,
            keep_firing_seconds=KEEP_FIRING_S,
            annotations=_notes(
                "Data disk more than 85 % full",
                "Migrate data (old model weights, spool) elsewhere or grow the volume before it fills.",
            ),
        ),
    ),
    (
        "node_down",
        RuleSpec(
            name="NodeDown",
            kind=RuleKind.ABSENT,
            severity=Severity.CRITICAL,
            silent_seconds=30,
            annotations=_notes(
                "Node sent no samples for 30 s",
                "Check the agent and the host; the autoscaler moves its replicas; re-route traffic meanwhile.",
            ),
        ),
    ),
    (
        "saturation_predicted",
        RuleSpec(
            name="SaturationPredicted",
            kind=RuleKind.PREDICTIVE,
            severity=Severity.WARNING,
            probability=0.5,
            horizon_seconds=900,
            for_seconds=60,
            keep_firing_seconds=KEEP_FIRING_S,
            annotations=_notes(
                "The pool is likely to saturate within 15 minutes",
                "Scale out now (replicas take minutes to start), or shed low-priority tenants.",
            ),
        ),
    ),
    (
        "replica_crash_looping",
        RuleSpec(
            name="ReplicaCrashLooping",
            kind=RuleKind.THRESHOLD,
            severity=Severity.WARNING,
            metric="replica_consecutive_crashes",
            op=Op.GE,
            threshold=3,
            for_seconds=0,
            keep_firing_seconds=KEEP_FIRING_S,
            annotations=_notes(
                "A replica of this pool crashed 3 times in a row (the agent backs off up to 60 s between restarts)",
                "Read the replica's log on the node (spool_dir/replica-logs); roll back the model or its settings.",
            ),
        ),
    ),
    (
        "scaling_failed",
        RuleSpec(
            name="ScalingFailed",
            kind=RuleKind.EVENT,
            severity=Severity.CRITICAL,
            event=EventKind.SCALING_FAILED,
            window_seconds=300,
            annotations=_notes(
                "The autoscaler's actuation failed",
                "Read GET /scaling-events for the actuator's error; fix its permissions or capacity.",
            ),
        ),
    ),
    (
        "scaling_stuck",
        RuleSpec(
            name="ScalingStuck",
            kind=RuleKind.EVENT,
            severity=Severity.WARNING,
            event=EventKind.SCALING_STUCK,
            for_seconds=900,
            keep_firing_seconds=KEEP_FIRING_S,
            annotations=_notes(
                "Ready replicas differ from the desired count for 15 minutes",
                "Look for nodes without free GPUs or replicas failing to start; add capacity.",
            ),
        ),
    ),
    (
        "quota_enforced",
        RuleSpec(
            name="TenantThrottled",
            kind=RuleKind.EVENT,
            severity=Severity.INFO,
            event=EventKind.QUOTA_ENFORCED,
            window_seconds=300,
            annotations=_notes(
                "A tenant was throttled for crowding out a latency-critical tenant",
                "Raise the tenant's quota, move it to its own pool, or tell its owner.",
            ),
        ),
    ),
    (
        "forecast_failing",
        RuleSpec(
            name="ForecastFailing",
            kind=RuleKind.EVENT,
            severity=Severity.WARNING,
            event=EventKind.FORECAST_FAILING,
            for_seconds=300,
            annotations=_notes(
                "The forecaster fails for this subject: predictive scaling is off there",
                "Read the forecast's error (GET /pools/{name}/forecast); check the history and the model setting.",
            ),
        ),
    ),
)
