# mha-serve, CPU image: Debian 12 packages only (LibTorch 1.13 + OpenBLAS, gRPC 1.51).
#
#   docker build -t mha-serve:0.1.0-cpu .
#   docker run --rm -p 8500:8500 -p 8502:8502 mha-serve:0.1.0-cpu                 # example model
#   docker run --rm -p 8500:8500 -p 8502:8502 -v "$PWD/models:/models:ro" mha-serve:0.1.0-cpu
#
# Stages: build (the README's own scripts); runtime-packages -> runtime (binaries + runtime
# packages only) -> smoke (starts the server in the image, one forward pass, /readyz, /metrics)
# -> final.
# The CUDA variant is Dockerfile.cuda. tests/deploy checks this file and the runtime package list
# without a Docker engine (see docs/deploy.md).

ARG DEBIAN_IMAGE=debian:12
ARG RUNTIME_IMAGE=debian:12-slim

############################################################################### build
FROM ${DEBIAN_IMAGE} AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
WORKDIR /src
# Packages first, from the script alone, so this layer is reused until the script changes.
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN scripts/install-deps.sh build
COPY . .
# Exactly the README's build command (CI runs the same scripts).
RUN MHA_TARGETS="mha-server mha-client" scripts/build.sh
# Stop here, with the reason, if deploy/runtime-packages.txt no longer provides every library
# the binaries load (the runtime stage would otherwise fail only when the server starts).
RUN tests/deploy/check_runtime_packages.py --packages deploy/runtime-packages.txt \
      build/server/mha-server build/client/mha-client

############################################################################### runtime
# The runtime libraries in a stage of their own: a build can start a runtime stage from an image
# that has them already (RUNTIME_IMAGE; tests/container/tier.sh does for its second builder).
FROM ${RUNTIME_IMAGE} AS runtime-packages
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# Runtime libraries only: the list is derived from `ldd` of the binaries (see the file).
COPY deploy/runtime-packages.txt /tmp/runtime-packages.txt
RUN export DEBIAN_FRONTEND=noninteractive \
 && packages=$(sed -e 's/#.*//' /tmp/runtime-packages.txt | xargs) \
 && apt-get update -qq \
 && apt-get install -y -qq --no-install-recommends ${packages} \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt

FROM runtime-packages AS runtime
RUN groupadd --gid 10001 mha \
 && useradd --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin mha
COPY --from=build /src/build/server/mha-server /src/build/client/mha-client /usr/local/bin/
# Example model repository: one small model "example" (E=16, H=4; weights and config only).
# Mount your own repository over /models (<name>/{config.json, model.safetensors|model.pt}).
COPY tests/fixtures/cases/format_safetensors/config.json \
     tests/fixtures/cases/format_safetensors/model.safetensors /models/example/
RUN missing=$(ldd /usr/local/bin/mha-server /usr/local/bin/mha-client | grep 'not found' || true) \
 && { [ -z "${missing}" ] || { echo "${missing}" >&2; exit 1; }; } \
 && mha-server --help >/dev/null && mha-client --help >/dev/null

ENV MHA_GRPC_ADDRESS=0.0.0.0:8500 \
    MHA_METRICS_ADDRESS=0.0.0.0:8502 \
    MHA_MODEL_REPOSITORY=/models \
    MHA_GRACE_PERIOD_S=5
# 8500: gRPC (mha.v1.AttentionService, grpc.health.v1.Health, reflection).
# 8502: HTTP /metrics (Prometheus), /healthz, /readyz.
EXPOSE 8500 8502
USER 10001:10001
WORKDIR /tmp
# /readyz is 200 once the models are loaded; the port is MHA_METRICS_ADDRESS's (a `docker run -e`
# that moves or empties it is followed; empty = mha-client health on MHA_GRPC_ADDRESS's port).
HEALTHCHECK --interval=15s --timeout=10s --start-period=120s --retries=3 \
  CMD port="${MHA_METRICS_ADDRESS##*:}"; \
      if [ -n "$port" ]; then curl -fsS -o /dev/null "http://127.0.0.1:${port}/readyz"; \
      else mha-client --target "127.0.0.1:${MHA_GRPC_ADDRESS##*:}" health; fi || exit 1
# SIGTERM: the server stops accepting calls, reports NOT_SERVING and finishes in-flight calls
# for MHA_GRACE_PERIOD_S (5 s), below `docker stop`'s default timeout (10 s) so that a slow call
# is answered before SIGKILL. A longer grace period needs `docker run --stop-timeout` (or
# `docker stop -t`, Kubernetes terminationGracePeriodSeconds) above it.
STOPSIGNAL SIGTERM
ENTRYPOINT ["mha-server"]
CMD []

############################################################################### smoke
# The image as it will run (user 10001, its ENV): start the server on the example model, wait
# for /readyz, one forward pass, the health service and a metric; then a clean SIGTERM stop.
FROM runtime AS smoke
# Port 0 on loopback + port files: nothing fixed to collide with other builds on the same host
# (RUN shares the host's network namespace with the legacy builder).
RUN set -e; \
    mha-server --grpc-address 127.0.0.1:0 --port-file /tmp/grpc.port \
      --metrics-address 127.0.0.1:0 --metrics-port-file /tmp/metrics.port \
      > /tmp/server.log 2>&1 & pid=$!; \
    ready=0; for _ in $(seq 1 240); do \
      if [ -s /tmp/grpc.port ] && [ -s /tmp/metrics.port ] && \
         curl -fs -o /dev/null "http://127.0.0.1:$(cat /tmp/metrics.port)/readyz"; then \
        ready=1; break; fi; \
      kill -0 "$pid" 2>/dev/null || break; sleep 0.5; \
    done; \
    if [ "$ready" != 1 ]; then cat /tmp/server.log; echo "smoke: not ready" >&2; exit 1; fi; \
    grpc="127.0.0.1:$(cat /tmp/grpc.port)"; metrics="127.0.0.1:$(cat /tmp/metrics.port)"; \
    mha-client --target "$grpc" health; \
    mha-client --target "$grpc" forward --model example --batch 2 --seq 8; \
    curl -fsS -o /tmp/metrics.txt "http://${metrics}/metrics"; \
    grep -q '^mha_requests_total{.*model="example"' /tmp/metrics.txt; \
    kill -TERM "$pid"; wait "$pid"; \
    rm -f /tmp/server.log /tmp/metrics.txt /tmp/grpc.port /tmp/metrics.port; touch /tmp/smoke-ok

############################################################################### final
FROM runtime
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="mha-serve" \
      org.opencontainers.image.description="Multi-head-attention forward passes over gRPC (LibTorch, CPU)" \
      org.opencontainers.image.version="${VERSION}"
# Depending on the smoke stage makes every build run it.
COPY --from=smoke /tmp/smoke-ok /usr/share/doc/mha-serve/smoke-ok
