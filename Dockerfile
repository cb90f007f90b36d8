# zkcoord coordinator daemon image (for users with a Docker engine; the
# project's own tests run the real servers as local processes instead).
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# PySpark (the migration pipeline) needs a Java runtime.
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/zkcoord
COPY pyproject.toml README.md ./
COPY zkcoord ./zkcoord
COPY migrations ./migrations
RUN pip install --no-cache-dir .
RUN useradd --system --uid 10001 zkcoord
USER zkcoord
ENTRYPOINT ["zkcoord"]
CMD ["--help"]
