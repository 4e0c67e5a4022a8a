"""Running the node's replicas toward the target: the pools it runs, the pure reconcile decisions, starting replica
processes with their quota environment and GPUs, and the supervisor loop that observes and acts."""
