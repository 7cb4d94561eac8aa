# railyard, the kube-scheduler extender, as the sidecar image manifests/ deploy.
#
#   docker build -t railyard:0.1.0 .            (from the repository root)
#
# Two stages: the build stage generates the protobuf code with the pinned grpcio-tools and
# installs railyard into a virtualenv; the final image is that virtualenv on the same slim
# Python, run as a non-root user, with no compiler, pip cache or generator in it. It runs with
# readOnlyRootFilesystem (manifests/base/deployment.yaml): no bytecode is written, and the only
# writes, the Kubernetes client's temp files for a kubeconfig with inline certificates, go to
# the emptyDir the manifests mount at /tmp.

FROM python:3.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# The code generator lives in its own virtualenv, so it never reaches the final image.
RUN python -m venv /opt/protoc \
    && /opt/protoc/bin/pip install grpcio-tools==1.85.1
COPY pyproject.toml README.md ./
COPY proto ./proto
COPY extender ./extender
# Regenerate extender/api/v1 from proto/ (identical to the committed files; a test checks that).
RUN /opt/protoc/bin/python -m extender.api.generate \
    && python -m venv /opt/railyard \
    && /opt/railyard/bin/pip install /src

FROM python:3.11-slim-bookworm
LABEL org.opencontainers.image.title="railyard" \
      org.opencontainers.image.description="Topology-aware gang scheduling for GPU training jobs: a kube-scheduler extender" \
      org.opencontainers.image.licenses="Apache-2.0"
# A fixed numeric user, so runAsNonRoot can verify it without reading /etc/passwd.
RUN groupadd --system --gid 10001 railyard \
    && useradd --system --uid 10001 --gid railyard --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin railyard
COPY --from=build /opt/railyard /opt/railyard
# Bytecode was compiled at install time; never write .pyc next to a read-only root.
ENV PATH=/opt/railyard/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
USER 10001:10001
# HTTP verbs (loopback), gRPC API (loopback), /metrics (server.metrics_listen).
EXPOSE 8888 8889 9090
ENTRYPOINT ["railyard"]
CMD ["serve"]
