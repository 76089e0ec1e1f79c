"""An instant broker for measuring the SDK alone: one process that is both name server and
broker (every topic has 8 queues, retry topics do not exist), answering sends at once (nothing
stored) and pulls with 32 ready-made records (offsets patched in). Whatever throughput the SDK reaches against it is the SDK's
own ceiling on this machine; the gap to the real broker is the broker's share.

Run: ``python -m bench.fake_broker --port P`` (prints ``listening on 127.0.0.1:P``).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import struct
import time

from aiorocketmq.protocol.body import (
    BrokerData,
    GetConsumerListByGroupResponseBody,
    HeartbeatData,
    QueueData,
    TopicRouteData,
)
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.command import RemotingCommand
from aiorocketmq.protocol.loop import run
from aiorocketmq.protocol.message import (
    RECORD_BORN_HOST_POS,
    RECORD_QUEUE_OFFSET_POS,
    encode_properties,
    encode_record,
    pack_host,
)
from aiorocketmq.protocol.transport import Connection, Server

QUEUES = 8
PULL_RECORDS = 32
_OFFSET = struct.Struct(">q")
# born and store timestamps sit either side of the 8-byte IPv4 born host
_BORN_TIMESTAMP_POS = RECORD_BORN_HOST_POS - 8
_STORE_TIMESTAMP_POS = RECORD_BORN_HOST_POS + 8


class FakeBroker:
    def __init__(self, port: int, topic: str, size: int) -> None:
        self.addr = f"127.0.0.1:{port}"
        self.topic = topic
        host = pack_host("127.0.0.1", port)
        props = encode_properties(
            {"UNIQ_KEY": "7F0000010F8718B4AAC2573A5A4F0000", "CLUSTER": "Fake"}
        ).encode()
        record = encode_record(
            topic=topic.encode(), body=b"x" * size, properties=props, born_host=host, store_host=host
        )
        self.record_size = len(record)
        self.template = record * PULL_RECORDS
        self.client_ids: set[str] = set()
        self.sent = 0

    def route(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topic = str(cmd.ext_fields.get("topic", ""))
        if topic.startswith("%"):  # no retry topics here: consumers read only the real one
            return cmd.response(ResponseCode.TOPIC_NOT_EXIST, f"topic {topic} not exist")
        route = TopicRouteData(
            queue_datas=[
                QueueData(broker_name="fake", read_queue_nums=QUEUES, write_queue_nums=QUEUES, perm=6)
            ],
            broker_datas=[BrokerData(cluster="Fake", broker_name="fake", broker_addrs={0: self.addr})],
        )
        return cmd.response(body=route.encode())

    def heartbeat(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        data = HeartbeatData.decode(cmd.body)
        if data.consumer_data_set:
            self.client_ids.add(data.client_id)
            conn.add_close_callback(functools.partial(self._gone, data.client_id))
        return cmd.response()

    def _gone(self, client_id: str, conn: Connection) -> None:
        self.client_ids.discard(client_id)

    def consumers(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        body = GetConsumerListByGroupResponseBody(consumer_id_list=sorted(self.client_ids))
        return cmd.response(body=body.encode())

    def send(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        self.sent += 1
        return cmd.response(
            ext_fields={
                "msgId": "7F0000010000A5810000000000004714",
                "queueId": cmd.ext_fields.get("e", 0),
                "queueOffset": self.sent,
            }
        )

    def pull(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        offset = int(cmd.ext_fields["queueOffset"])
        count = min(PULL_RECORDS, int(cmd.ext_fields["maxMsgNums"]))
        body = bytearray(self.template[: count * self.record_size])
        # stamped at serve time so the consumer's born/stored-to-consumed figures mean something
        now = int(time.time() * 1000)
        for i in range(count):
            start = i * self.record_size
            _OFFSET.pack_into(body, start + RECORD_QUEUE_OFFSET_POS, offset + i)
            _OFFSET.pack_into(body, start + _BORN_TIMESTAMP_POS, now)
            _OFFSET.pack_into(body, start + _STORE_TIMESTAMP_POS, now)
        fields = {
            "suggestWhichBrokerId": 0,
            "nextBeginOffset": offset + count,
            "minOffset": 0,
            "maxOffset": 1 << 40,
        }
        return cmd.response(ResponseCode.SUCCESS, None, fields, bytes(body))

    def offset(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response(ext_fields={"offset": 0})

    def ok(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.response()

    def handlers(self) -> dict[int, object]:
        return {
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.route,
            RequestCode.HEART_BEAT: self.heartbeat,
            RequestCode.UNREGISTER_CLIENT: self.ok,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self.consumers,
            RequestCode.SEND_MESSAGE_V2: self.send,
            RequestCode.SEND_BATCH_MESSAGE: self.send,
            RequestCode.PULL_MESSAGE: self.pull,
            RequestCode.QUERY_CONSUMER_OFFSET: self.offset,
            RequestCode.GET_MAX_OFFSET: self.offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self.ok,
        }


async def serve(port: int, topic: str, size: int) -> None:
    fake = FakeBroker(port, topic, size)
    server = Server(fake.handlers(), name="fake broker")  # type: ignore[arg-type]
    bound = await server.listen("127.0.0.1", port)
    print(f"fake broker listening on 127.0.0.1:{bound}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--topic", default="BenchmarkSdk")
    parser.add_argument("--size", type=int, default=128)
    args = parser.parse_args()
    run(serve(args.port, args.topic, args.size))


if __name__ == "__main__":
    main()
