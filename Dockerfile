# Image for the `demo` and `rules` services of docker-compose.yml, and for the `serve-0` and
# `serve-1` services of its "tier" profile: installs this package and by default runs
# `latency-budget demo`, which sends example AI-request traces to an OTLP endpoint.
FROM python:3.12-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
# .dockerignore keeps the built tools, caches and VCS data out of the build context.
COPY . .
RUN pip install . && rm -rf /src

# /rules: docker-compose.yml's `rules` service writes the Prometheus rules there, into a
# volume that starts as a copy of this folder (so owned by demo). /wal: the serve
# instances' write-ahead log (`serve --wal-dir /wal`), a volume of each instance's own.
RUN useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin demo \
    && install -d -o demo -g demo /rules /wal
VOLUME ["/wal"]
USER demo
WORKDIR /home/demo

CMD ["latency-budget", "demo", "--otlp-endpoint", "http://collector:4317"]
