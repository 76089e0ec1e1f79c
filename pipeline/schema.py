"""The row shapes of the ``rocketmq`` data source: the fixed read schema (one row per stored
message, like Kafka's source) and its Arrow form, which every batch the reader yields must
match exactly."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

if TYPE_CHECKING:
    import pyarrow as pa

READ_SCHEMA = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("broker", StringType(), False),
        StructField("queue_id", IntegerType(), False),
        StructField("queue_offset", LongType(), False),
        StructField("msg_id", StringType(), False),
        StructField("tags", StringType(), True),
        StructField("keys", StringType(), True),
        StructField("body", BinaryType(), False),
        StructField("properties", MapType(StringType(), StringType(), False), False),
        StructField("born_timestamp", TimestampType(), False),
        StructField("store_timestamp", TimestampType(), False),
        StructField("born_host", StringType(), False),
        StructField("store_host", StringType(), False),
        StructField("reconsume_times", IntegerType(), False),
    ]
)

COLUMNS = tuple(READ_SCHEMA.fieldNames())


@lru_cache(maxsize=1)
def arrow_read_schema() -> pa.Schema:
    """The Arrow schema Spark expects from the reader (timestamps in microseconds, UTC)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(READ_SCHEMA, timezone="UTC")
