"""A read on Spark's pseudo-distributed ``local-cluster`` master, run as its own process by
``test_local_cluster.py`` (a process has one SparkContext, and the test session's is
``local[2]``): a master, two workers and an executor JVM on each, so every task runs in an
executor's Python worker, none in the driver. Prints one JSON line with what it saw.

Usage: ``python -m tests.pipeline.local_cluster_job NAMESRV TOPIC[,TOPIC...]``
"""

from __future__ import annotations

import json
import os
import sys

from pyspark.sql import SparkSession


def main(namesrv: str, topics: str) -> None:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master("local-cluster[2,1,1024]")
        .appName("aiorocketmq-local-cluster")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    try:
        spark.sparkContext.setLogLevel("ERROR")
        from aiorocketmq import pipeline

        pipeline.register(spark)
        df = (
            spark.read.format("rocketmq")
            .option("namesrv", namesrv)
            .option("subscribe", topics)
            .option("minPartitions", "10")
            .load()
        )
        rows = df.selectExpr(
            "topic", "broker", "queue_id", "queue_offset", "CAST(body AS STRING) AS body"
        ).collect()
        executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # minus the driver
        print(
            json.dumps(
                {
                    "executors": executors,
                    "partitions": df.rdd.getNumPartitions(),
                    "rows": [[r.topic, r.broker, r.queue_id, r.queue_offset, r.body] for r in rows],
                }
            )
        )
    finally:
        spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:3])
