"""The demo's timeline, pure: what the printout says to expect and when, computed from the plan (the compressed day,
the noisy episode's rules, the SLO's calibration) and the product's own knobs (the HPA target and tolerance, the
scale-down window, the enforcer's windows, the alert rule's ``for`` and keep-firing), so that it stays true when one
of them changes."""

from __future__ import annotations

from collections.abc import Mapping

from alerting.defaults import DEFAULT_RULES
from alerting.rules import RuleSpec
from autoscaler.policy.rails import scale_down_window_seconds
from autoscaler.policy.settings import PolicySettings
from demo.burst import NoisyEpisode, SloCalibration
from demo.history import SeededHistory
from demo.load import CompressedDay
from fleet.pools import PoolSpec
from isolation.enforcer import EnforcerLoopSettings

LATENCY_RULE = "P99LatencyAboveSlo"  # the default rule the episode breaks: chat's p99 over its SLO


def clock(seconds: float) -> str:
    """Seconds from the load's start as m:ss: 70 → 1:10."""
    whole = round(seconds)
    return f"{whole // 60}:{whole % 60:02d}"


def scale_thresholds(spec: PoolSpec, settings: PolicySettings | None = None) -> tuple[float, float]:
    """The demand past which the pool's minimum scales up (HPA: past the target by more than the tolerance), and
    the demand its minimum carries within the target (what a scale-down back to it needs): chat's 3 replicas of
    1 request/s at 0.7 → 2.31 and 2.1 requests/s."""
    if spec.replica_capacity is None:
        raise ValueError("the demo's pools configure their replica capacity")
    settings = settings or PolicySettings()
    carried = spec.min_replicas * settings.target_utilization * spec.replica_capacity
    return carried * (1 + settings.tolerance), carried


def latency_rule(name: str = LATENCY_RULE) -> RuleSpec:
    return next(spec for _key, spec in DEFAULT_RULES if spec.name == name)


def timeline_lines(
    day: CompressedDay,
    episode: NoisyEpisode,
    calibration: SloCalibration,
    pools: Mapping[str, PoolSpec],
    seeded: SeededHistory,
    enforcer: EnforcerLoopSettings,
    policy: PolicySettings,
) -> list[str]:
    """The printout's timeline; ``policy`` carries the server's scale-down window (``scale_down_window_seconds``).
    What depends on the machine's speed (the SLO, the burst's size, so when the throttle and the alert come) is said
    as the recorded events to expect and their bounds, not as a time."""
    chat = pools["chat"]
    up_rps, down_rps = scale_thresholds(chat, policy)
    up_s, down_s = day.crossings(up_rps, down_rps)
    window_s = scale_down_window_seconds(policy, chat.startup_seconds)
    rule = latency_rule()
    keep_min = rule.keep_firing_seconds / 60
    hours = len(day.history_rps) * day.trace_step_s / 3600
    seeded_text = (
        f"{seeded.minutes} minutes seeded"
        if seeded.minutes
        else "already there from an earlier run (nothing seeded twice)"
    )
    return [
        f"What the next minutes show (from the 'Load:' line on; the day repeats every {clock(day.lap_s)}); a line",
        "'Recorded M:SS ...' is the server's own record (/api/v1/enforcement-events, /api/v1/alerts) as it is made:",
        f"  0:00  chat has {hours:g} h of history, the trace's hours before the day as 1-minute rollups ending now",
        f"        ({seeded_text}): /pools/chat?range=6h shows them, its forecast and band from the first forecast",
        f"  0:00  the day starts at 16:00 of the trace, one trace hour every {3600 / day.time_scale:g} s "
        f"(time scale {day.time_scale:g}x);",
        "        vision starts with a replica on each node, more than acme's classifications need: down to its minimum",
        f"  {clock(up_s)}  the evening: chat demand passes {up_rps:.2f} requests/s ({chat.min_replicas} replicas "
        "past the HPA target and tolerance): chat scales up",
        *_episode_lines(episode, calibration, enforcer),
        f"  {clock(down_s)}  the night: chat demand falls to {down_rps:.2f} requests/s, what {chat.min_replicas} "
        "replicas carry",
        f"  burst's end + {window_s:.0f} s  chat scales down once {window_s:.0f} s of decisions agree (HPA's "
        "stabilization window;",
        "        the burst's admitted requests are demand too)",
        f"  {clock(day.lap_s)}  the next day: chat scales up and down again"
        + (
            f"; globex bursts every {episode.every_days} days, {clock(episode.every_days * day.lap_s)} apart"
            if episode.every_days > 1
            else ""
        ),
        f"  burst's end + ~{keep_min:g} min  'Recorded ... resolved': every rule keeps firing {keep_min:g} min "
        f"({rule.keep_firing_seconds:.0f} s after",
        "        its condition last held) so one burst does not page twice",
    ]


def _episode_lines(episode: NoisyEpisode, calibration: SloCalibration, enforcer: EnforcerLoopSettings) -> list[str]:
    """The calibration and the burst, and the recorded events to expect of them, from their earliest."""
    throttle_s = enforcer.decide.trigger_windows * enforcer.interval_seconds
    calm_s = enforcer.decide.calm_windows * enforcer.interval_seconds
    share = enforcer.decide.quota_margin
    rule = latency_rule()
    grown_by = clock(episode.start_s + episode.steps_to_max() * episode.step_s)
    return [
        f"  {clock(calibration.warm_up_end_s)}  'Calibration': chat's SLO becomes {calibration.slo_factor:g} × the "
        f"worst p99 its replicas reported from {clock(calibration.warm_up_start_s)}",
        "        (what this machine delivers before the evening; the line says the figure)",
        f"  {clock(episode.start_s)}  globex bursts into chat: {episode.first_rps:g} requests/s of "
        f"{episode.generated_tokens} tokens, ×{episode.growth:g} each {episode.step_s:g} s in which",
        f"        acme's chat p99 stays within the SLO (at most {episode.max_rps:g}/s, by {grown_by}); then, as the "
        "server records them:",
        f"  from ~{clock(episode.start_s + throttle_s)}  'Recorded ... throttle globex': on a node where globex takes "
        f"over its quota share + {share:.0%}",
        f"        of chat's tokens while acme's p99 is over the SLO for {enforcer.decide.trigger_windows} windows "
        f"({throttle_s:.0f} s); TenantThrottled fires with it",
        f"  from ~{clock(episode.start_s + rule.for_seconds)}  'Recorded ... alert {rule.name} firing' "
        f"({rule.severity.value}): a node's chat p99 over the SLO for {rule.for_seconds:.0f} s",
        f"  by {clock(episode.end_s)}  globex's burst ends once both are recorded (at most {clock(episode.max_s)} "
        f"after it began);",
        f"        'Recorded ... restore globex' after {calm_s:.0f} s of calm",
    ]
