"""Runnable example pipelines built on the ``rocketmq`` data source (see ``docs/spark.md``)."""
