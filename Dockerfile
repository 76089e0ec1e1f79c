# One image for the name server, the brokers, the tools (mqadmin, mqbench) and the dashboard;
# the "spark" target adds Java and PySpark for the example pipeline.

# The wheel, compiled (the C codecs and the mypyc-built hot modules) where a compiler is; the
# images that run it carry no compiler.
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY aiorocketmq ./aiorocketmq
COPY protocol ./protocol
COPY namesrv ./namesrv
COPY broker ./broker
COPY client ./client
COPY pipeline ./pipeline
COPY tools ./tools
COPY dashboard ./dashboard
RUN pip wheel --no-deps -w /wheels .

FROM python:3.11-slim AS base
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /app
COPY --from=build /wheels /wheels
RUN pip install "$(ls /wheels/aiorocketmq-*.whl)[dashboard]"
# name server, broker VIP channel, broker, broker metrics, dashboard
EXPOSE 9876 10909 10911 5557 8080
VOLUME ["/data"]
CMD ["mqnamesrv", "--store-dir", "/data/namesrv"]

FROM base AS spark
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
RUN pip install "$(ls /wheels/aiorocketmq-*.whl)[spark]"
ENV PYSPARK_PYTHON=/usr/local/bin/python
