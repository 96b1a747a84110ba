# syntax=docker/dockerfile:1
#
# The triolog broker as a container: docker build -t triolog .
#   docker run -d --name triolog -p 127.0.0.1:9092:9092 -p 127.0.0.1:19092:19092 -p 127.0.0.1:9404:9404 \
#     -v triolog-data:/var/lib/triolog triolog
#
# Configuration, lowest layer first: the embedded defaults, /etc/triolog/server.properties (a copy
# of deploy/server.properties; mount your own over it), TRIOLOG_<KEY> environment variables
# (log.retention.ms -> TRIOLOG_LOG_RETENTION_MS), then options appended to `serve` in the command.
# Environment beats the file, so the keys set by ENV below are changed with `docker run -e`.
# Kafka clients get localhost:19092 from Metadata (an empty host advertises localhost): right for
# a port published as above; from other containers set TRIOLOG_KAFKA_ADVERTISED_LISTENERS
# (e.g. PLAINTEXT://triolog:19092).
#
# tests/ops/test_image.py runs this file's pip steps, ENV, ENTRYPOINT, CMD and HEALTHCHECK outside
# Docker (no engine on the CI machines; the host's C compiler stands in for the builder's): keep
# each pip step a RUN of its own, starting with `pip`.

ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm
# The same Python on the full Debian image: gcc, libc6-dev and the Python headers, which the slim
# image lacks. Without a compiler the build would still succeed, silently pure Python.
ARG BUILDER_IMAGE=python:3.11.13-bookworm

# -- builder: a wheel for triolog (its compiled core built by Cython and gcc, setup.py) and for
# every dependency (all of them ship binary wheels) ----------------------------------------------
FROM ${BUILDER_IMAGE} AS builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
COPY . .
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

# -- runtime: the slim base, tini, the wheels installed, nothing to build with ------------------
FROM ${PYTHON_IMAGE}
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore

# tini is PID 1: it forwards docker stop's SIGTERM to the broker, which shuts down gracefully
# (drains connections, flushes, writes checkpoints and the clean-shutdown marker), and it reaps
# orphaned processes. Python as PID 1 would ignore SIGTERM until its handler is installed (the
# kernel gives PID 1 no default signal actions) and would never reap orphans.
# The data directory is made and chowned before VOLUME, so a new named volume is the user's.
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini=0.19.0-1+b3 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 triolog \
    && useradd --system --uid 10001 --gid triolog --home-dir /var/lib/triolog --no-create-home \
       --shell /usr/sbin/nologin triolog \
    && mkdir -p /var/lib/triolog /etc/triolog \
    && chown triolog:triolog /var/lib/triolog

# The wheels are bind-mounted from the builder, not copied: they never become a layer.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels pip install --no-cache-dir --no-index --find-links=/wheels /wheels/triolog-*.whl

COPY deploy/server.properties /etc/triolog/server.properties

ENV TRIOLOG_LOG_DIRS=/var/lib/triolog \
    TRIOLOG_LISTENERS=PLAINTEXT://:9092 \
    TRIOLOG_KAFKA_LISTENERS=PLAINTEXT://:19092 \
    TRIOLOG_METRICS_LISTENER=http://:9404 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1

VOLUME ["/var/lib/triolog"]
# 9092: triolog's msgpack protocol; 19092: Kafka's wire protocol; 9404: Prometheus /metrics.
EXPOSE 9092 19092 9404
USER 10001:10001
WORKDIR /var/lib/triolog

# An api_versions round trip: the broker's event loop answering, not merely a bound port.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["triolog", "health", "--bootstrap-server", "127.0.0.1:9092", "--timeout", "3"]

STOPSIGNAL SIGTERM
ENTRYPOINT ["tini", "--", "triolog"]
CMD ["serve", "--config", "/etc/triolog/server.properties"]
