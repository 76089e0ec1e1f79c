"""docs/operations.md's permission table stays true: it lists every request code the broker and
the name server serve (no more, no fewer), and what each row says a code needs is what the
checks do: ACL 1.0's admin set and resource checks (``broker/acl.py``), ACL 2.0's contexts
(``broker/auth/requests.py``), the name server's signed writes (``namesrv/auth.py``)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import NamedTuple

import pytest

from aiorocketmq.broker.acl import ADMIN_CODES, needed_resources
from aiorocketmq.broker.auth.requests import remoting_needs
from aiorocketmq.broker.config import BrokerConfig
from aiorocketmq.broker.server import Broker
from aiorocketmq.broker.store import StoreConfig
from aiorocketmq.namesrv.auth import ADMIN_WRITES, BROKER_WRITES
from aiorocketmq.namesrv.config import NamesrvSettings
from aiorocketmq.namesrv.server import NameServer
from aiorocketmq.protocol.codes import RequestCode
from aiorocketmq.protocol.controller import ControllerRequestCode
from aiorocketmq.protocol.pop import PopRequestCode

DOC = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
SECTION = "### Permissions by request code"
BROKER_HEADER = "| Code | Request | ACL 1.0 here |"
NAMESRV_HEADER = "| Code | Request | Name server,"


class Row(NamedTuple):
    name: str
    acl1: str
    acl2: str


def _tables() -> tuple[dict[int, Row], dict[int, str]]:
    text = DOC.read_text(encoding="utf-8")
    assert SECTION in text, f"{DOC} has no {SECTION!r} section"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    broker: dict[int, Row] = {}
    namesrv: dict[int, str] = {}
    table: str | None = None
    for line in section.splitlines():
        if line.startswith(BROKER_HEADER):
            table = "broker"
            continue
        if line.startswith(NAMESRV_HEADER):
            table = "namesrv"
            continue
        if not line.startswith("| ") or line.startswith("|---"):
            if not line.startswith("|"):
                table = None
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        code = int(cells[0])
        if table == "broker":
            assert code not in broker, f"code {code} has two rows"
            broker[code] = Row(cells[1], cells[2], cells[4])
        elif table == "namesrv":
            assert code not in namesrv, f"code {code} has two rows"
            namesrv[code] = cells[2]
            assert cells[1] == _name(code, cells[1]), line
    return broker, namesrv


def _unconditional(text: str) -> str:
    """A cell without its parenthesised cases (a retry topic's group, an optional topic)."""
    return re.sub(r"\([^)]*\)", "", text)


def broker_rows() -> dict[int, Row]:
    return _tables()[0]


def _name(code: int, documented: str) -> str:
    """The code's name (an alias such as REGISTER_TOPIC_IN_NAMESRV for 217 counts)."""
    enums = (RequestCode, PopRequestCode, ControllerRequestCode)
    for enum in enums:
        member = getattr(enum, documented, None)
        if member is not None and int(member) == code:
            return documented
    for enum in enums:
        try:
            return enum(code).name
        except ValueError:
            continue
    raise ValueError(f"{code} is no request code we know")


@pytest.fixture(scope="module")
def broker_codes(tmp_path_factory: pytest.TempPathFactory) -> set[int]:
    """The codes a broker registers handlers for (built, not started)."""
    root = tmp_path_factory.mktemp("permission-table")
    config = BrokerConfig.load(
        None,
        {
            "brokerName": "doc",
            "listenPort": 0,
            "brokerIP1": "127.0.0.1",
            "storePathRootDir": str(root),
            "metricsPromExporterEnable": "false",
        },
    )
    broker = Broker(config, StoreConfig.load(None, {"storePathRootDir": str(root)}))
    return {int(code) for code in broker.server.handlers}


def namesrv_codes(tmp_path: Path) -> set[int]:
    server = NameServer(NamesrvSettings.load(None, {"storePathRootDir": str(tmp_path), "listenPort": 0}))
    return {int(code) for code in server.server.handlers}


#: Every header field a check reads, naming a topic (T), groups (G, H), a cluster (C).
FIELDS = {
    "topic": "T",
    "b": "T",
    "group": "G",
    "a": "G",
    "consumerGroup": "G",
    "groupName": "G",
    "srcGroup": "G",
    "destGroup": "H",
    "producerGroup": "P",
    "topicList": "T",
    "filterGroups": "G",
    "compareGroup": "G",
    "clusterName": "C",
    "brokerClusterName": "C",
}
_LOCK = json.dumps(
    {"consumerGroup": "G", "clientId": "c", "mqSet": [{"topic": "T", "brokerName": "b", "queueId": 0}]}
)
BODIES: dict[int, bytes] = {
    RequestCode.HEART_BEAT: json.dumps(
        {
            "clientID": "c",
            "producerDataSet": [],
            "consumerDataSet": [
                {
                    "groupName": "G",
                    "consumeType": "CONSUME_PASSIVELY",
                    "messageModel": "CLUSTERING",
                    "consumeFromWhere": "CONSUME_FROM_LAST_OFFSET",
                    "subscriptionDataSet": [{"topic": "T", "subString": "*"}],
                    "unitMode": False,
                }
            ],
        }
    ).encode(),
    RequestCode.LOCK_BATCH_MQ: _LOCK.encode(),
    RequestCode.UNLOCK_BATCH_MQ: _LOCK.encode(),
    RequestCode.QUERY_ASSIGNMENT: json.dumps({"topic": "T", "consumerGroup": "G", "clientId": "c"}).encode(),
    PopRequestCode.BATCH_ACK_MESSAGE: json.dumps(
        {
            "brokerName": "b",
            "acks": [{"c": "G", "t": "T", "r": "0", "so": 0, "q": 0, "rq": 0, "pt": 0, "it": 1, "b": "AQ=="}],
        }
    ).encode(),
}


def test_the_broker_table_lists_every_code_the_broker_serves(broker_codes: set[int]) -> None:
    rows = broker_rows()
    assert set(rows) - broker_codes == set(), "rows for codes the broker does not serve"
    assert broker_codes - set(rows) == set(), "codes the broker serves without a row"
    for code, row in rows.items():
        assert row.name == _name(code, row.name), (code, row.name)


def test_the_acl1_column_says_what_the_acl1_check_does() -> None:
    for code, row in broker_rows().items():
        need = needed_resources(code, FIELDS, BODIES.get(code))
        if row.acl1 == "admin":
            assert code in ADMIN_CODES, (code, row)
        elif row.acl1 == "signature":
            assert code not in ADMIN_CODES and not need, (code, row, need)
        else:
            assert code not in ADMIN_CODES, (code, row)
            assert need, f"{row.name}: the table says {row.acl1!r}, the check asks nothing"
            main = _unconditional(row.acl1)
            for perm in ("PUB", "SUB"):
                asked = any(perm in p.name for p in need.values() if p.name)
                assert asked == (perm in main), (code, row, need)


def test_the_acl2_column_says_what_the_acl2_check_does() -> None:
    for code, row in broker_rows().items():
        needs = remoting_needs(code, FIELDS, BODIES.get(code), "C", frozenset(int(c) for c in ADMIN_CODES))
        kinds = {need.resource.type.name.lower() for need in needs}
        actions = {action.name.lower() for need in needs for action in need.actions}
        if row.acl2 == "authenticated only":
            assert not needs, (code, row, needs)
            continue
        assert needs, f"{row.name}: the table says {row.acl2!r}, the check asks nothing"
        if row.acl2.endswith("on the cluster"):
            assert kinds == {"cluster"}, (code, row, needs)
        else:
            assert kinds - {"cluster"} and kinds <= {"topic", "group", "cluster"}, (code, row, needs)
            for kind in ("topic", "group"):
                assert (kind in kinds) == (kind in _unconditional(row.acl2)), (code, row, needs)
        words = r"\b(Pub|Sub|Get|Update|Create|Delete|List)\b"
        named = {word.lower() for word in re.findall(words, _unconditional(row.acl2))}
        assert named == actions, (code, row, needs)


def test_the_namesrv_table_lists_every_code_and_who_may_write(tmp_path: Path) -> None:
    rows = _tables()[1]
    served = namesrv_codes(tmp_path)
    assert set(rows) == served, set(rows) ^ served
    for code, who in rows.items():
        expected = (
            "admin account"
            if code in ADMIN_WRITES
            else "broker or admin account"
            if code in BROKER_WRITES
            else "open"
        )
        assert who == expected, (code, who)
