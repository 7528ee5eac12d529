# One image for every celery-kernel service in compose.yaml.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY kernel kernel
COPY celery_app celery_app
COPY beat_schedule beat_schedule
COPY adapters adapters
COPY examples examples
RUN pip install --no-cache-dir -e '.[postgres]' && useradd --create-home kernel
USER kernel
