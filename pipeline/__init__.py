"""PySpark connector for RocketMQ topics: the ``rocketmq`` data source (batch and streaming
reads, batch and streaming writes) and example pipelines (:mod:`pipeline.examples`).

Register the source once per Spark session::

    from pipeline import RocketMQDataSource
    spark.dataSource.register(RocketMQDataSource)

Modules: ``source`` (the data source and its readers), ``sink`` (writers), ``options``
(option parsing and errors), ``planning`` (driver-side offset resolution), ``reading``
(executor-side range pulls), ``records`` (pull bodies to Arrow columns), ``schema``.
"""

from .options import DataLossError, RocketMQOptionError
from .sink import RocketMQWriteError
from .source import RocketMQDataSource

__all__ = ["DataLossError", "RocketMQDataSource", "RocketMQOptionError", "RocketMQWriteError"]
