"""The fleet's shared concepts, below every room that acts on the fleet: the pool registry, the leader lease, the
liveness-aware fleet read model and the desired-state board (docs/architecture.md, "The seam")."""
