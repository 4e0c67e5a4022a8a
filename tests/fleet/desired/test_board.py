"""The desired-state board: a part published by one server reaches another at its refresh, versions only grow,
a part published unchanged is not written again, a part never published says nothing, and the parts merge
field by field."""

from __future__ import annotations

import json
import threading

from sqlalchemy import Engine, event, select

from fleet.desired.board import DesiredBoard, DesiredPart, Part, desired_snapshots, overlay
from wire.control import DesiredState, PoolDesired, PoolLimits, QuotaDesired, SloClass, TenantDesired

DIGEST = "a" * 64


def pools(**replicas: int) -> DesiredState:
    return DesiredState(pools={name: PoolDesired(replicas=n) for name, n in replicas.items()})


def tenants_part() -> DesiredPart:
    acme = TenantDesired(
        slo_class=SloClass.LATENCY_CRITICAL,
        quotas={"chat": QuotaDesired(rate_rps=10.0, max_concurrency=8), "embed": QuotaDesired(rate_rps=2.0)},
    )
    return DesiredPart(
        common=DesiredState(
            tenants={"acme": acme},
            pool_limits={"chat": PoolLimits(cpu_share=0.5)},
            tenant_keys={DIGEST: "acme"},
        ),
        nodes={
            "node-a": DesiredState(
                tenants={"acme": TenantDesired(quotas={"chat": QuotaDesired(rate_rps=4.0, max_concurrency=3)})},
                pool_limits={"chat": PoolLimits(cpu_share=0.25)},
            )
        },
    )


def test_a_part_published_on_one_server_reaches_another_at_its_refresh(engine: Engine) -> None:
    leader, follower = DesiredBoard(engine), DesiredBoard(engine)  # two server processes on one database
    leader.publish(Part.POOLS, DesiredPart(nodes={"node-a": pools(chat=2)}), now=100.0)
    assert leader.for_node("node-a") == pools(chat=2)  # the publisher's memory at once
    # never refreshed: its first answer reads what is stored (it said nothing, and agents dropped their tenant keys)
    assert follower.for_node("node-a") == pools(chat=2)
    assert follower.version(Part.POOLS) == 1
    leader.publish(Part.POOLS, DesiredPart(nodes={"node-a": pools(chat=3)}), now=105.0)
    assert follower.for_node("node-a") == pools(chat=2)  # cached until the part moves here
    follower.refresh()
    assert follower.for_node("node-a") == pools(chat=3)


def test_the_version_only_grows_and_a_refresh_reads_a_body_only_when_it_moved(engine: Engine) -> None:
    leader, follower = DesiredBoard(engine), DesiredBoard(engine)
    assert [leader.publish(Part.TENANTS, tenants_part(), now=t) for t in (1.0, 2.0, 3.0)] == [1, 2, 3]
    new_leader = DesiredBoard(engine)  # a failover: the next leader never saw the part, and still goes on from 3
    assert new_leader.publish(Part.TENANTS, tenants_part(), now=4.0) == 4
    with engine.connect() as conn:
        assert conn.execute(select(desired_snapshots.c.version)).scalars().all() == [4]
    statements: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    follower.refresh()
    follower.refresh()  # nothing moved: the versions only
    bodies = [s for s in statements if "body" in s]
    assert len(statements) == 3 and len(bodies) == 1
    assert follower.version(Part.TENANTS) == 4


def test_a_part_published_unchanged_is_written_once(engine: Engine) -> None:
    board = DesiredBoard(engine)
    assert board.publish_changed(Part.POOLS, DesiredPart(), now=1.0) == 1  # never published: written, even empty
    assert board.publish_changed(Part.POOLS, DesiredPart(), now=2.0) == 1  # the same: no write, no new version
    assert board.publish_changed(Part.POOLS, DesiredPart(nodes={"node-a": pools(chat=1)}), now=3.0) == 2


def test_a_refresh_that_read_before_a_publish_never_takes_the_board_back(engine: Engine) -> None:
    board = DesiredBoard(engine)
    board.publish(Part.POOLS, DesiredPart(nodes={"node-a": pools(chat=1)}), now=1.0)
    stale = DesiredBoard(engine)
    stale.refresh()
    board.publish(Part.POOLS, DesiredPart(nodes={"node-a": pools(chat=2)}), now=2.0)
    # the older snapshot arrives late (a refresh that read version 1 while this publish wrote version 2)
    board._install(stale._snapshots)
    assert board.for_node("node-a") == pools(chat=2)
    assert board.version(Part.POOLS) == 2


def test_a_part_never_published_says_nothing(engine: Engine) -> None:
    board = DesiredBoard(engine)
    board.refresh()
    assert board.for_node("node-a") is None
    assert board.for_node_json("node-a") == b"null"
    board.publish(Part.TENANTS, tenants_part(), now=1.0)
    state = board.for_node("node-b")
    assert state is not None and state.pools is None  # no pools part: the agent keeps its own --pools
    board.publish(Part.POOLS, DesiredPart(), now=1.0)  # published, but empty: still nothing of pools
    assert board.for_node("node-b") == state
    assert json.loads(board.for_node_json("node-b")).keys() == {"pool_limits", "tenants", "tenant_keys"}


def test_a_nodes_own_entries_override_the_common_ones_key_by_key(engine: Engine) -> None:
    board = DesiredBoard(engine)
    board.publish(Part.TENANTS, tenants_part(), now=1.0)
    board.publish(Part.POOLS, DesiredPart(common=pools(chat=1), nodes={"node-a": pools(chat=2, embed=0)}), now=1.0)
    a, b = board.for_node("node-a"), board.for_node("node-b")
    assert a is not None and b is not None
    assert a.pools == pools(chat=2, embed=0).pools  # a node's pools replace the whole common set
    assert b.pools == pools(chat=1).pools
    acme = a.tenants["acme"]
    assert acme.slo_class is SloClass.LATENCY_CRITICAL  # common's class: the node's entry did not name one
    assert acme.quotas == {"chat": QuotaDesired(rate_rps=4.0, max_concurrency=3), "embed": QuotaDesired(rate_rps=2.0)}
    assert a.pool_limits == {"chat": PoolLimits(cpu_share=0.25)}
    assert b.tenants["acme"].quotas["chat"] == QuotaDesired(rate_rps=10.0, max_concurrency=8)
    assert a.tenant_keys == b.tenant_keys == {DIGEST: "acme"}
    # the wire form leaves out what is unset, as the agent reads its defaults for it
    wire = json.loads(board.for_node_json("node-a"))
    assert wire["tenants"]["acme"]["quotas"]["embed"] == {"rate_rps": 2.0}
    assert wire["pools"] == {"chat": {"replicas": 2}, "embed": {"replicas": 0}}
    assert DesiredState.model_validate(wire) == a


def test_a_tenant_only_one_node_names_keeps_its_own_class() -> None:
    throttled = DesiredState(tenants={"bulk": TenantDesired(quotas={"chat": QuotaDesired(max_concurrency=32)})})
    merged = overlay(DesiredState(tenants={"acme": TenantDesired(slo_class=SloClass.BATCH)}), throttled)
    assert merged.tenants["bulk"].slo_class is SloClass.STANDARD
    assert merged.tenants["acme"].slo_class is SloClass.BATCH


def test_a_body_this_server_cannot_read_keeps_the_last_good_part(engine: Engine) -> None:
    board, other = DesiredBoard(engine), DesiredBoard(engine)
    board.publish(Part.POOLS, DesiredPart(nodes={"node-a": pools(chat=2)}), now=1.0)
    other.refresh()
    with engine.begin() as conn:
        bad = {"common": {}, "nodes": {"node-a": {"pools": {"chat": {"replicas": -1}}}}}
        conn.execute(desired_snapshots.update().values(version=2, body=bad))
    other.refresh()
    assert other.for_node("node-a") == pools(chat=2)
    assert other.version(Part.POOLS) == 1


def test_answers_asked_from_many_threads_while_parts_change_end_on_the_latest(engine: Engine) -> None:
    board = DesiredBoard(engine)
    stop = threading.Event()
    seen: list[DesiredState | None] = []

    def ask() -> None:
        while not stop.is_set():
            seen.append(board.for_node("node-a"))

    askers = [threading.Thread(target=ask) for _ in range(4)]
    for t in askers:
        t.start()
    for n in range(1, 21):
        board.publish(Part.POOLS, DesiredPart(nodes={"node-a": pools(chat=n)}), now=float(n))
    stop.set()
    for t in askers:
        t.join()
    assert board.for_node("node-a") == pools(chat=20)
    assert seen
