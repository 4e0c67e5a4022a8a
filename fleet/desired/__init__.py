"""Desired state: what every node should run and enforce, decided by the control loops at tick time and carried to
each node by its ingest answer (the models, :class:`wire.control.DesiredState` and its fields, are the wire's).

The words, the same in every module of it: a **part** is one loop's say (:class:`fleet.desired.board.Part`: ``pools``,
``tenants``), its body a :class:`~fleet.desired.board.DesiredPart` (what every node is told, and per node what overrides
it); the leader of a part **publishes** it on the **board** (:class:`~fleet.desired.board.DesiredBoard`) as its next
**version**; the board keeps each part's latest version, its **snapshot**, in memory and in ``desired_snapshots``; every
server **refreshes** its board, and the ingest route asks it **for a node**: the parts merged.

Where each piece lives, each in the lowest room that can hold it:

- :mod:`fleet.desired.board`: the board, the parts, their snapshots and the merge;
- :mod:`fleet.desired.pools`: the pools part: where each managed pool's replicas are placed (``placements``), the
  deleted pools the nodes still drain (``retired_pools``), and what each node is told from them; placed and published
  by the local actuator (:mod:`autoscaler.actuators.local`);
- :mod:`isolation.desired`: the tenants part, built on the board from isolation's tenants, quotas, throttle levels
  and keys (it needs the tenant store and the planner, so it lives in isolation), published by the enforcer.

**Stored once.** A pool's decided replicas are ``pools.desired_replicas`` (the controller's count, in dry run too,
whatever the actuator: the API, the dashboard and alerting read it); ``placements`` is where the local actuator put them
(a node's share, only what fits: 7 of 9 when the nodes have room for 7; nothing for a dry-run pool or under the
kubernetes actuator); a snapshot is what the nodes are told (every part merged per node, unmanaged pools restated,
deleted ones at 0, for every server process to answer from). Three different things, not three copies of one.
"""
