# syntax=docker/dockerfile:1
# batchgate: one image for the webhook (the default) and the reconciler:
#   docker run IMAGE                          # serve (HTTPS on 0.0.0.0:8443)
#   docker run IMAGE reconcile                # the reconciler
# The default bundle (policies/) ships inside the batchgate wheel, so `serve`, `check -`
# and `test` use it with no --policies; in Kubernetes the batchgate-policies ConfigMap
# (generated from the same policies/) is mounted at /etc/batchgate/policies and the
# Deployments pass --policies=/etc/batchgate/policies (manifests/).

ARG PYTHON_IMAGE=python:3.11-slim

# -- build: a wheel of batchgate plus the locked wheels of everything it depends on ----
# requirements/runtime.txt pins every dependency with its hashes (`make lock`), so two builds
# a month apart install the same code; batchgate's own wheel is built with the locked setuptools.
FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY requirements/runtime.txt requirements/runtime.txt
RUN pip wheel --require-hashes --no-deps --wheel-dir /wheels -r requirements/runtime.txt \
 && pip install --no-index --find-links=/wheels setuptools
COPY pyproject.toml README.md ./
COPY webhook/ webhook/
COPY policies/ policies/
RUN pip wheel --no-deps --no-build-isolation --wheel-dir /wheels .

# -- runtime: the wheels installed into a venv; no compilers, no sources, no pip in the venv --
FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="batchgate" \
      org.opencontainers.image.description="Admission webhook and reconciler for HPC and batch work on Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/batchgate/bin:$PATH
# The wheels are bind-mounted from the build stage, so they never become a layer here.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m venv --without-pip /opt/batchgate \
 && python -m pip --python /opt/batchgate/bin/python install --no-index --find-links=/wheels batchgate \
 && python -m compileall -q /opt/batchgate \
 && mkdir -p /etc/batchgate/certs \
 && chown 65532:65532 /etc/batchgate/certs
# Non-root, numeric (runAsNonRoot can verify it). The certs directory is writable so that
# a bare `docker run` can generate a self-signed certificate; in Kubernetes a Secret is
# mounted there read-only and the root filesystem is read-only.
USER 65532:65532
WORKDIR /tmp
EXPOSE 8443
ENTRYPOINT ["batchgate"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8443", "--cert-dir", "/etc/batchgate/certs"]
