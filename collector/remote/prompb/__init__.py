"""Prometheus remote-write wire formats and their generated modules (``scripts/generate-protos.sh``): 1.0's
``types.proto`` and ``remote.proto`` from prometheus/prometheus v2.42.0 (``remote_pb2.WriteRequest``) and 2.0's
``write_v2.proto`` (``write_v2_pb2.Request``), each what ``POST /api/v1/write`` receives, snappy block-compressed."""
