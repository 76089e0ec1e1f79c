"""The Spark connector against a broker with ACL on: with ``accessKey``/``secretKey`` the sink
writes and the batch source reads back (planner and tasks sign every request); without them
the read is refused with the broker's ACL reason."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from aiorocketmq.client import ClientOptions
from aiorocketmq.client.blocking import BlockingAdmin
from aiorocketmq.pipeline.reading import READER_GROUP

from .conftest import TestCluster, unique

ADMIN = {"accessKey": "spark_admin", "secretKey": "spark_admin_1"}
SPARK = {"accessKey": "spark_user", "secretKey": "spark_user_1"}


def test_spark_reads_and_writes_signed(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    root = tmp_path_factory.mktemp("spark-acl")
    topic = unique("SparkAcl")
    acl_file = root / "plain_acl.yml"
    acl_file.write_text(
        yaml.safe_dump(
            {
                "accounts": [
                    {**ADMIN, "admin": True},
                    {
                        **SPARK,
                        "defaultTopicPerm": "DENY",
                        "defaultGroupPerm": "DENY",
                        "topicPerms": [f"{topic}=PUB|SUB"],
                        "groupPerms": [f"{READER_GROUP}=SUB"],
                    },
                ]
            }
        )
    )
    cluster = TestCluster(root, ("broker-a",), aclEnable="true", **{"rocketmq.acl.plain.file": str(acl_file)})
    admin = BlockingAdmin(
        cluster.namesrv, options=ClientOptions(access_key=ADMIN["accessKey"], secret_key=ADMIN["secretKey"])
    )
    try:
        admin.create_topic(topic, 2)
        admin.wait_for_route(topic, brokers=["broker-a"], timeout=30)
        rows = [(f"signed-{i}".encode(),) for i in range(20)]
        df = spark.createDataFrame(rows, "body binary").coalesce(1)
        writer = df.write.format("rocketmq").option("namesrv", cluster.namesrv).option("topic", topic)
        writer.options(**SPARK).mode("append").save()

        def read(**options: str) -> Any:
            reader = spark.read.format("rocketmq").option("namesrv", cluster.namesrv).option("topic", topic)
            return reader.options(**options).load()

        back = read(**SPARK).collect()
        assert sorted(r.body for r in back) == sorted(body for (body,) in rows)
        with pytest.raises(Exception, match="No accessKey is configured"):
            read().collect()
    finally:
        admin.close()
        cluster.stop()
