"""What the node tells of its replicas: the node report each push carries, the engine-profile replicas' readings,
and the agent's own serving metrics on its ``/metrics``."""
