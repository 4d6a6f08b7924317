# syntax=docker/dockerfile:1
# kvoffload-exporter: the exporter only (runtime dependencies from deploy/requirements.lock; no
# grafanalib: render the dashboards/alerts bundle with `pip install '.[bundle]'` outside the image).
#
#   docker build -t kvoffload-exporter:0.1.0 .
#   docker run --rm --network container:<vllm> kvoffload-exporter:0.1.0            # sidecar defaults
#   docker run --rm -p 127.0.0.1:9466:9466 kvoffload-exporter:0.1.0 serve --web.listen-address 0.0.0.0:9466 \
#       --target http://vllm-a:8000 --target http://vllm-b:8000                    # central mode
#
# Reproducible inputs: the dependency set is pinned with sha256 hashes (installed with
# --require-hashes, wheels only, no resolver); pin the base image by digest for a byte-stable
# build: --build-arg PYTHON_IMAGE=python:3.12-slim@sha256:<digest>.
ARG PYTHON_IMAGE=python:3.12-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
# Dependencies first: this layer is rebuilt only when a lock file changes.
COPY deploy/requirements.lock deploy/build-requirements.lock deploy/
RUN python -m venv /opt/kvoffload \
 && /opt/kvoffload/bin/pip install --require-hashes --only-binary=:all: --no-deps -r deploy/requirements.lock \
 && python -m venv /opt/build \
 && /opt/build/bin/pip install --require-hashes --only-binary=:all: --no-deps -r deploy/build-requirements.lock
COPY pyproject.toml README.md ./
COPY kvoffload_exporter kvoffload_exporter
# Build the wheel with the pinned setuptools (no build isolation: nothing is fetched unpinned), install
# it without dependencies, prove the pinned set is complete, then drop pip from the runtime venv.
RUN /opt/build/bin/pip wheel --no-deps --no-build-isolation --wheel-dir /wheels . \
 && /opt/kvoffload/bin/pip install --no-deps --no-index /wheels/*.whl \
 && /opt/kvoffload/bin/pip check \
 && /opt/kvoffload/bin/pip uninstall --yes pip

FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
# Where the source lives: set it to your repository's URL (no default pretends to know it).
ARG SOURCE=unknown
LABEL org.opencontainers.image.title="kvoffload-exporter" \
      org.opencontainers.image.description="Prometheus sidecar exporter for vLLM KV-cache offloading (OffloadingConnector)" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}"
# A fixed numeric UID/GID, so Kubernetes' runAsNonRoot can verify it without a passwd lookup.
RUN groupadd --system --gid 10001 kvoffload \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin kvoffload \
 && install -d -o 10001 -g 10001 -m 0700 /var/lib/kvoffload
COPY --from=build /opt/kvoffload /opt/kvoffload
# XDG_STATE_HOME: where the canary keeps its salt secret (mount a volume or a Secret there; the root
# file system may be read-only). KVOFFLOAD_HEALTHCHECK_URL: change it together with --web.listen-address.
# MALLOC_ARENA_MAX: large bodies are parsed in worker threads; glibc's arena per thread kept what they freed
# (every hostile case at once: 328 MiB peak with the default, 226 MiB with 2; docs/security.md).
ENV PATH=/opt/kvoffload/bin:$PATH \
    MALLOC_ARENA_MAX=2 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    XDG_STATE_HOME=/var/lib/kvoffload \
    KVOFFLOAD_HEALTHCHECK_URL=http://127.0.0.1:9466/healthz
USER 10001:10001
WORKDIR /var/lib/kvoffload
EXPOSE 9466
# slim has no curl: the stdlib client; urlopen raises (exit 1) on refusal, timeout or a non-2xx answer.
HEALTHCHECK --interval=30s --timeout=5s --start-period=15s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen(os.environ['KVOFFLOAD_HEALTHCHECK_URL'], timeout=4)"]
ENTRYPOINT ["kvoffload-exporter"]
# Sidecar defaults: vLLM on the same network namespace (pod), scraped from outside the pod.
CMD ["serve", "--web.listen-address", "0.0.0.0:9466", "--target", "http://127.0.0.1:8000"]
