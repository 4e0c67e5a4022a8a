"""The fleet's shared concepts, below every room that acts on the fleet: the pool registry, the leader lease, the
liveness-aware fleet read model and the desired state (:mod:`fleet.desired`: the board and the pools part)
(docs/architecture.md, "The seam")."""
