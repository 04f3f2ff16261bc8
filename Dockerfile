# syntax=docker/dockerfile:1
# MessageWeave container image: `messageweave serve` on PORT (8080), configured by environment.
# Build: docker build -t messageweave .   Run: see compose.yaml and the README ("Container").

FROM python:3.11-slim AS build
WORKDIR /src
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
# Wheels of exactly the locked versions (hash-checked), so the runtime stage needs no compiler
# and no index; the package itself is built with the locked setuptools (scripts/lock.sh).
COPY requirements.lock ./
RUN pip wheel --no-cache-dir --require-hashes --wheel-dir /wheels -r requirements.lock \
    && pip install --no-cache-dir --no-index --no-deps /wheels/setuptools-*.whl
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /wheels .

FROM python:3.11-slim
# tini reaps children and forwards SIGTERM, so `messageweave serve` shuts down gracefully.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /app --create-home --shell /usr/sbin/nologin mw
COPY --from=build /wheels /wheels
# Every wheel of the build stage: the locked set and the package, nothing resolved anew.
# hadolint ignore=DL3013
RUN pip install --no-cache-dir --no-index --no-deps /wheels/*.whl \
    && rm -rf /wheels
USER 10001
WORKDIR /app
ENV PORT=8080 PYTHONUNBUFFERED=1
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:' + os.environ.get('PORT', '8080') + '/healthz', timeout=4)"]
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["messageweave", "serve"]
