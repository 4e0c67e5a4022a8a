#!/usr/bin/env bash
# Regenerates the checked-in protobuf and gRPC modules (*_pb2.py, *_pb2.pyi, *_pb2_grpc.py) beside every .proto in
# the repository. Each .proto is a copy of its upstream file, whose header names the repository, path and version;
# tests/test_protos.py fails when a generated module is not what this script makes of its .proto.
#   scripts/generate-protos.sh [OUT_DIR]   (default: in place; PYTHON: the interpreter with grpcio-tools, default the
#   project's .venv, else python3)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-.}"
python="${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}"
git ls-files --cached --others --exclude-standard '*.proto' | while read -r proto; do
  "$python" -m grpc_tools.protoc -I . --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" "$proto"
done
