# One image for the name server, the brokers, the tools (mqadmin, mqbench) and the dashboard;
# the "spark" target adds Java and PySpark for the example pipeline.
FROM python:3.11-slim AS base
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY pyproject.toml README.md ./
COPY aiorocketmq ./aiorocketmq
COPY protocol ./protocol
COPY namesrv ./namesrv
COPY broker ./broker
COPY client ./client
COPY pipeline ./pipeline
COPY tools ./tools
COPY dashboard ./dashboard
RUN pip install ".[dashboard]"
# name server, broker VIP channel, broker, broker metrics, dashboard
EXPOSE 9876 10909 10911 5557 8080
VOLUME ["/data"]
CMD ["mqnamesrv", "--store-dir", "/data/namesrv"]

FROM base AS spark
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
RUN pip install ".[spark]"
ENV PYSPARK_PYTHON=/usr/local/bin/python
