# The fleetpilot image the Kubernetes manifests run (deploy/kubernetes/): the server, the agent and `fleetpilot db
# upgrade`, all through the `fleetpilot` entrypoint. Build from the repository root:
#   docker build -t REGISTRY/fleetpilot:0.1.0 .
# then set it under `images:` in deploy/kubernetes/kustomization.yaml. The built-in workload's torch is the CPU build
# (TORCH_INDEX); for replicas on CUDA, build with TORCH_INDEX=https://download.pytorch.org/whl/cu124 (or the CUDA
# version of the nodes' driver) — the agent itself needs no CUDA libraries: it reads the GPUs through NVML, which the
# NVIDIA container runtime mounts.
FROM python:3.11-slim AS build
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
WORKDIR /src
COPY pyproject.toml README.md ./
COPY fleetpilot ./fleetpilot
COPY wire ./wire
COPY collector ./collector
COPY fleet ./fleet
COPY predictor ./predictor
COPY autoscaler ./autoscaler
COPY isolation ./isolation
COPY inference_agent ./inference_agent
COPY web ./web
COPY alerting ./alerting
COPY migrations ./migrations
COPY replay ./replay
COPY demo ./demo
COPY bench ./bench
RUN python -m venv /opt/fleetpilot \
    && /opt/fleetpilot/bin/pip install --no-cache-dir "torch==${TORCH_VERSION}" --index-url "${TORCH_INDEX}" \
    && /opt/fleetpilot/bin/pip install --no-cache-dir ".[server,agent,workload]"

FROM python:3.11-slim
COPY --from=build /opt/fleetpilot /opt/fleetpilot
RUN useradd --system --uid 10001 --home-dir /var/lib/fleetpilot --create-home fleetpilot
USER 10001
WORKDIR /var/lib/fleetpilot
ENV PATH=/opt/fleetpilot/bin:$PATH PYTHONUNBUFFERED=1
ENTRYPOINT ["fleetpilot"]
CMD ["server", "--host", "0.0.0.0"]
