"""Rate-of-change inputs from storage: the window's first values are re-read at most every window / 60 seconds (a
1-hour rule reads its raw-sample edge once a minute, not every second), and afresh when the rule is edited."""

from __future__ import annotations

from sqlalchemy import Engine, delete

from alerting.gather import WindowEdges, gather
from alerting.rule_store import RuleStore
from alerting.rules import Op, RuleKind, RuleSpec
from collector.tables import samples
from tests.alerting.test_evaluator import push
from web.services import AppServices

ECC = "gpu_power_watts"  # a catalog metric as the counter: its raw column is what the window's edge reads


def changes(services: AppServices, now: float, edges: WindowEdges) -> dict[str, float]:
    rules = [r for r in RuleStore(services.engine).list() if r.spec.kind.value == "rate_of_change"]
    with services.engine.connect() as conn:
        inputs = gather(conn, rules, now, fleet=services.fleet, fresh_seconds=3.0, edges=edges)
    return {r.node: r.values[ECC] for found in inputs.windowed.values() for r in found}


def test_the_window_edge_is_read_once_a_minute_for_an_hour_window_and_again_after_an_edit(
    services: AppServices, engine: Engine
) -> None:
    spec = RuleSpec(name="Grows", kind=RuleKind.RATE_OF_CHANGE, metric=ECC, op=Op.GT, threshold=10, window_seconds=3600)
    rule = RuleStore(engine).create(spec, now=0)
    push(services, "n1", 100.0, gpu_power_watts=5.0)  # the window's first sample (window starts at 3,700 − 3,600)
    push(services, "n1", 3_700.0, gpu_power_watts=25.0)
    edges = WindowEdges()
    assert changes(services, 3_700.0, edges) == {"n1": 20.0}
    with engine.begin() as conn:
        conn.execute(delete(samples).where(samples.c.ts < 200))  # the edge is gone from storage ...
    assert changes(services, 3_730.0, edges) == {"n1": 20.0}  # ... but not re-read within 60 s
    assert changes(services, 3_761.0, edges) == {}  # past window / 60: re-read, nothing at the edge now
    push(services, "n1", 3_770.0, gpu_power_watts=30.0)
    push(services, "n1", 175.0, gpu_power_watts=1.0)
    assert changes(services, 3_775.0, edges) == {}  # cached (empty) for another minute
    RuleStore(engine).update(rule.id, {"threshold": 11}, now=3_775.0)  # an edit: a new version reads afresh
    assert changes(services, 3_775.0, edges) == {"n1": 29.0}
