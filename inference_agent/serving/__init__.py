"""The workload a node runs and serves: its replicas' processes, the tenant-facing serving API in front of them, and
what the node reports of them. ``workload.py`` wires the parts together; ``routing.py`` is what the supervisor
publishes and the front end and the probes route by."""
