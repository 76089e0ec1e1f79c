"""The row shapes of the ``rocketmq`` data source: the read schema (one row per stored
message, like Kafka's source; a ``headers`` column with ``includeHeaders``) and its Arrow
form, which every batch the reader yields must match exactly."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from pyspark.sql.types import (
    ArrayType,
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

#: With ``includeHeaders``: every property of the message as a key/value pair, in stored
#: order, of the same type as Kafka's ``headers`` column.
HEADERS = StructField(
    "headers",
    ArrayType(
        StructType([StructField("key", StringType(), True), StructField("value", BinaryType(), True)]),
        True,
    ),
    True,
)


def read_schema(include_headers: bool = False) -> StructType:
    return StructType([*READ_SCHEMA.fields, HEADERS]) if include_headers else READ_SCHEMA


@lru_cache(maxsize=2)
def arrow_read_schema(include_headers: bool = False) -> pa.Schema:
    """The Arrow schema Spark expects from the reader (timestamps in microseconds, UTC)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(read_schema(include_headers), timezone="UTC")
