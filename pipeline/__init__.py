"""PySpark connector for RocketMQ topics: the ``rocketmq`` data source (batch and streaming
reads, batch and streaming writes) and example pipelines (:mod:`aiorocketmq.pipeline.examples`).

Register the source once per Spark session::

    from aiorocketmq.pipeline import RocketMQDataSource
    spark.dataSource.register(RocketMQDataSource)

or ``aiorocketmq.pipeline.register(spark)``, which also makes ``spark`` the JVM thread's active session
(see :func:`register`).

Modules: ``source`` (the data source and its readers), ``sink`` (writers), ``options``
(option parsing and errors), ``planning`` (driver-side offset resolution), ``reading``
(executor-side range pulls), ``records`` (pull bodies to Arrow columns), ``schema``.
"""

from typing import Any

from .options import DataLossError, RocketMQOptionError, RocketMQWriteError
from .source import RocketMQDataSource

__all__ = [
    "DataLossError",
    "RocketMQDataSource",
    "RocketMQOptionError",
    "RocketMQWriteError",
    "activate",
    "register",
]


def register(spark: Any) -> None:
    """Register the ``rocketmq`` format with ``spark`` and :func:`activate` it."""
    spark.dataSource.register(RocketMQDataSource)
    activate(spark)


def activate(spark: Any) -> None:
    """Make ``spark`` the active session of the calling JVM thread. Spark finds a Python
    *streaming sink* through that thread's active session only, and a driver thread that did
    not build the session (a test runner, a notebook cell, a thread of yours) may have none,
    which fails ``writeStream.format("rocketmq").start()`` with DATA_SOURCE_NOT_FOUND; call
    this just before such a ``start()``."""
    spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
