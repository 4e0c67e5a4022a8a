"""Prometheus remote-write 1.0 wire format: ``types.proto`` and ``remote.proto`` copied from prometheus/prometheus
v2.42.0 and their generated modules (``scripts/generate-protos.sh``); ``remote_pb2.WriteRequest`` is what
``POST /api/v1/write`` receives, snappy block-compressed."""
