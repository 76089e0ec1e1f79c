"""Operator command-line tools built on the asyncio SDK: ``mqadmin`` (cluster administration
with RocketMQ's command names and options) and ``mqbench`` (RocketMQ's benchmark producer and
consumer, with the same options and report lines)."""
