"""Each rule kind's condition, judged purely: one :class:`Verdict` per label set the inputs can say something about.

A label set the inputs say nothing about (a series without a fresh reading, a stale forecast) gets no verdict: its
alert keeps its state (:mod:`alerting.lifecycle`). A verdict says whether the condition holds now, with the value
that decided it.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from alerting.inputs import Inputs, Reading
from alerting.rules import Aggregate, EventKind, GroupBy, Op, Rule, RuleKind, RuleSpec


@dataclass(frozen=True)
class Verdict:
    labels: dict[str, str]
    active: bool
    value: float | None


def verdicts(rule: Rule, inputs: Inputs, now: float) -> list[Verdict]:
    judge = JUDGES[rule.spec.kind]
    return judge(rule, inputs, now)


def _compare(spec: RuleSpec, value: float, threshold: float | None = None) -> bool:
    limit = spec.threshold if threshold is None else threshold
    assert spec.op is not None and limit is not None
    return Op(spec.op).holds(value, limit)


def _slo_verdicts(spec: RuleSpec, found: Sequence[tuple[Reading, float]], slo: Mapping[str, float]) -> list[Verdict]:
    """Per series, against ``slo_ratio`` × its pool's SLO; a series of no pool, or of one without an SLO, is not
    judged (there is nothing to hold it to)."""
    assert spec.slo_ratio is not None
    return [
        Verdict(r.labels(), _compare(spec, v, spec.slo_ratio * slo[r.pool]), v)
        for r, v in found
        if r.pool is not None and r.pool in slo
    ]


def _in_scope(spec: RuleSpec, reading: Reading, nodes_of_pool: dict[str, set[str]]) -> bool:
    """Every reading without a pool filter; with one, the pool's replicas and the GPUs and NICs of its nodes."""
    if spec.pool is None:
        return True
    if reading.pool is not None:
        return reading.pool == spec.pool
    return reading.node in nodes_of_pool.get(spec.pool, set())


def _fresh_values(rule: Rule, inputs: Inputs, now: float) -> list[tuple[Reading, float]]:
    """(reading, value) of every in-scope reading that carries the metric and is fresh enough to judge."""
    spec = rule.spec
    assert spec.metric is not None
    windowed = spec.stat is not None or spec.kind is RuleKind.RATE_OF_CHANGE
    readings = inputs.windowed.get(rule.id, ()) if windowed else inputs.readings
    nodes_of_pool = inputs.nodes_of_pool()
    return [
        (r, r.values[spec.metric])
        for r in readings
        if spec.metric in r.values and r.fresh(now, inputs.fresh_seconds) and _in_scope(spec, r, nodes_of_pool)
    ]


def _threshold(rule: Rule, inputs: Inputs, now: float) -> list[Verdict]:
    spec = rule.spec
    found = _fresh_values(rule, inputs, now)
    if spec.slo_ratio is not None:
        return _slo_verdicts(spec, found, inputs.slo_p99_seconds)
    if spec.group_by is GroupBy.SERIES:
        return [Verdict(r.labels(), _compare(spec, v), v) for r, v in found]
    groups: dict[tuple[tuple[str, str], ...], list[float]] = defaultdict(list)
    if spec.group_by is GroupBy.FLEET:
        groups[()] = [v for _r, v in found]
    else:
        nodes_of_pool = inputs.nodes_of_pool()
        for r, v in found:
            for pool in _pools_counted(r, nodes_of_pool):
                if spec.pool is None or pool == spec.pool:
                    groups[(("pool", pool),)].append(v)
    assert spec.aggregate is not None
    how = Aggregate(spec.aggregate)
    least = 2 if how is Aggregate.SPREAD else 1  # one series has no spread: it says nothing of a pool's balance
    out = []
    for key, values in sorted(groups.items()):
        if len(values) >= least:
            value = aggregate(values, how)
            out.append(Verdict(dict(key), _compare(spec, value), value))
    return out


def _pools_counted(reading: Reading, nodes_of_pool: Mapping[str, set[str]]) -> list[str]:
    """The pools a reading counts toward in a per-pool aggregate: a replica's own; a GPU's only where its sample
    names the pool it serves (its pod's, a remote-write series' pool label): the node's other GPUs serve other pools
    or none, and a remote-write node's idle GPU at 12 % against the pool's at 87 % paged PoolGpuImbalance on a
    one-node pool; a NIC's, every pool of its node (a NIC serves them all)."""
    if reading.pool is not None:
        return [reading.pool]
    if reading.device is not None:
        return []
    return [p for p, nodes in nodes_of_pool.items() if reading.node in nodes]


def aggregate(values: Sequence[float], how: Aggregate) -> float:
    """One value of several series: 0.9, 0.4 and 0.7 → sum 2.0, avg 0.667, max 0.9, min 0.4, spread 0.5."""
    if how is Aggregate.SUM:
        return math.fsum(values)
    if how is Aggregate.AVG:
        return math.fsum(values) / len(values)
    if how is Aggregate.MAX:
        return max(values)
    if how is Aggregate.MIN:
        return min(values)
    return max(values) - min(values)


def _rate_of_change(rule: Rule, inputs: Inputs, now: float) -> list[Verdict]:
    """The gatherer put each series' change over the window under the metric's name."""
    return [Verdict(r.labels(), _compare(rule.spec, v), v) for r, v in _fresh_values(rule, inputs, now)]


def _subject_labels(kind: str, subject: str) -> dict[str, str]:
    """``pool`` "chat" → pool; ``device`` "node-a/0" → node and gpu; ``replicas`` "node-a/chat" → node and pool."""
    if kind == "pool":
        return {"pool": subject}
    node, _, rest = subject.rpartition("/")
    return {"node": node, "gpu": rest} if kind == "device" else {"node": node, "pool": rest}


def _predictive(rule: Rule, inputs: Inputs, _now: float) -> list[Verdict]:
    """Saturation within the rule's horizon: the forecast's probability over its own horizon when that is no longer
    than the rule's, else its first likely step (``eta_seconds``) must fall inside the rule's horizon."""
    spec = rule.spec
    assert spec.probability is not None and spec.horizon_seconds is not None
    out = []
    for f in inputs.forecasts:
        if f.kind != spec.subject_kind.value or f.error is not None or f.probability is None:
            continue  # a stale forecast says nothing new; the forecast_failing rule covers it
        labels = _subject_labels(f.kind, f.subject)
        if spec.pool is not None and labels.get("pool") != spec.pool:
            continue
        within = (f.horizon_seconds or math.inf) <= spec.horizon_seconds or (
            f.eta_seconds is not None and f.eta_seconds <= spec.horizon_seconds
        )
        out.append(Verdict(labels, f.probability >= spec.probability and within, f.probability))
    return out


def _absent(rule: Rule, inputs: Inputs, now: float) -> list[Verdict]:
    spec = rule.spec
    nodes_of_pool = inputs.nodes_of_pool()
    scope = nodes_of_pool.get(spec.pool, set()) if spec.pool is not None else None
    out = []
    for node, last_seen in sorted(inputs.node_last_seen.items()):
        if scope is not None and node not in scope:
            continue
        silent = now - last_seen
        if spec.metric is None:
            assert spec.silent_seconds is not None
            out.append(Verdict({"node": node}, silent >= spec.silent_seconds, silent))
        elif node in inputs.up_nodes:  # does any of its fresh readings carry the metric?
            carried = any(
                r.node == node and spec.metric in r.values and r.fresh(now, inputs.fresh_seconds)
                for r in inputs.readings
            )
            out.append(Verdict({"node": node}, not carried, None))
    return out


def _event(rule: Rule, inputs: Inputs, now: float) -> list[Verdict]:
    """Event rules name only what is happening: a label set no longer named resolves (see lifecycle)."""
    spec = rule.spec
    window = spec.window_seconds or 0.0
    if spec.event is EventKind.SCALING_FAILED:
        return [
            Verdict({"pool": p.pool}, True, now - p.last_failed_ts)
            for p in inputs.pools
            if p.last_failed_ts is not None and now - p.last_failed_ts <= window and _pool_ok(spec, p.pool)
        ]
    if spec.event is EventKind.SCALING_STUCK:  # a count fleetpilot does not apply (dry run, an HPA's) is not stuck
        return [
            Verdict({"pool": p.pool}, p.desired != p.ready, float((p.desired or 0) - p.ready))
            for p in inputs.pools
            if p.desired is not None and p.applied and _pool_ok(spec, p.pool)
        ]
    if spec.event is EventKind.QUOTA_ENFORCED:
        seen = {(t.tenant, t.node, t.pool) for t in inputs.throttles if now - t.ts <= window and _pool_ok(spec, t.pool)}
        return [Verdict({"tenant": t, "node": n, "pool": p}, True, None) for t, n, p in sorted(seen)]
    return [  # a forecaster still warming up (no fit yet for lack of history) is not failing: no verdict
        Verdict({**_subject_labels(f.kind, f.subject), "subject": f"{f.kind}/{f.subject}/{f.metric}"}, True, None)
        for f in inputs.forecasts
        if f.error is not None
        and not f.warming_up
        and (spec.pool is None or _subject_labels(f.kind, f.subject).get("pool") == spec.pool)
    ]


def _pool_ok(spec: RuleSpec, pool: str) -> bool:
    return spec.pool is None or spec.pool == pool


JUDGES: dict[RuleKind, Callable[[Rule, Inputs, float], list[Verdict]]] = {
    RuleKind.THRESHOLD: _threshold,
    RuleKind.RATE_OF_CHANGE: _rate_of_change,
    RuleKind.PREDICTIVE: _predictive,
    RuleKind.ABSENT: _absent,
    RuleKind.EVENT: _event,
}
