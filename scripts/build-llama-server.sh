#!/usr/bin/env bash
# Build llama.cpp's `llama-server` (a real engine the tests run as an engine profile) from the llama.cpp copy that
# the llama-cpp-python sdist on PyPI vendors: PyPI has no prebuilt wheel, and this machine reaches no other source.
# Into .cache/llama-server/bin/ (git-ignored); a second run with the binary there does nothing. ~3 minutes on 2
# cores at -O1 (the tests' tiny model needs no speed). Compiled for x86-64 with AVX2 even with GGML_NATIVE=OFF.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=0.3.36  # llama-cpp-python, vendoring llama.cpp's tools/server with Prometheus /metrics (llamacpp:*)
OUT=.cache/llama-server
if [ -x "$OUT/bin/llama-server" ] && [ "$(cat "$OUT/VERSION" 2>/dev/null)" = "$VERSION" ]; then
    exit 0
fi
PYTHON=${PYTHON:-python3}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$PYTHON" -m pip download "llama-cpp-python==$VERSION" --no-deps --no-binary=:all: -d "$WORK" -q
tar xzf "$WORK/llama_cpp_python-$VERSION.tar.gz" -C "$WORK"
SRC="$WORK/llama_cpp_python-$VERSION/vendor/llama.cpp"
cmake -S "$SRC" -B "$WORK/build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_FLAGS_RELEASE="-O1 -DNDEBUG" -DCMAKE_CXX_FLAGS_RELEASE="-O1 -DNDEBUG" \
    -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF -DGGML_CCACHE=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF >/dev/null
cmake --build "$WORK/build" --target llama-server -j"$(nproc)" >/dev/null
mkdir -p "$OUT/bin"
cp "$WORK/build/bin/llama-server" "$OUT/bin/llama-server"
echo "$VERSION" > "$OUT/VERSION"
echo "built $OUT/bin/llama-server (llama-cpp-python $VERSION's llama.cpp)"
