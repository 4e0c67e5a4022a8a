"""Engines found on the node: the pods of this node that carry fleetpilot's annotations (read from the Kubernetes API
server with httpx, never the ``kubernetes`` package), and which pod uses which GPU (the kubelet's pod-resources API)."""
