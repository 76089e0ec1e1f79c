"""Unit tests of the dashboard's pure parts: trace records, the users file and session tokens,
message rendering, the command line. No network, no browser."""

from __future__ import annotations

import json

import pytest

from aiorocketmq.client import MessageExt
from aiorocketmq.dashboard.cli import parse_args
from aiorocketmq.dashboard.render import body_as, hexdump, messages_csv
from aiorocketmq.dashboard.trace import FIELD_SEPARATOR, TraceRecord, decode_trace, encode_record
from aiorocketmq.dashboard.users import Sessions, UsersFileError, parse_users


def test_trace_records_round_trip() -> None:
    records = [
        TraceRecord(
            "Pub",
            "ID1",
            1700000000000,
            "shop",
            "Orders",
            "paid",
            "order-1",
            "10.0.0.1:10911",
            cost_ms=3,
            success=True,
        ),
        TraceRecord(
            "SubBefore", "ID1", 1700000000100, "billing", keys="order-1", request_id="r1", retry_times=0
        ),
        TraceRecord(
            "SubAfter",
            "ID1",
            1700000000200,
            "billing",
            keys="order-1",
            cost_ms=7,
            success=False,
            request_id="r1",
        ),
    ]
    body = "".join(encode_record(r) for r in records)
    assert decode_trace(body) == records


def test_trace_reads_the_clients_older_and_odd_records() -> None:
    # A 4.x Pub record without the offset msgId (13 fields), a SubAfter of 6 fields, an
    # unknown kind and a truncated record: the known ones decode, the others are skipped.
    pub = FIELD_SEPARATOR.join(["Pub", "5", "R", "g", "T", "ID", "", "", "h:1", "10", "2", "0", "true"])
    sub_after = FIELD_SEPARATOR.join(["SubAfter", "req", "ID", "4", "false", "k"])
    body = f"{pub}\x02{sub_after}\x02Other{FIELD_SEPARATOR}x\x02Pub{FIELD_SEPARATOR}1\x02"
    decoded = decode_trace(body)
    assert [(r.kind, r.msg_id, r.success, r.cost_ms) for r in decoded] == [
        ("Pub", "ID", True, 2),
        ("SubAfter", "ID", False, 4),
    ]


def test_users_file_roles() -> None:
    users = parse_users("# users\nadmin = s3cret,1\nviewer=look\nother=pw,0\n")
    assert {u.name: u.admin for u in users.values()} == {"admin": True, "viewer": False, "other": False}
    assert users["admin"].password == "s3cret"
    with pytest.raises(UsersFileError, match="no password"):
        parse_users("nobody=\n")
    with pytest.raises(UsersFileError, match="0 or 1"):
        parse_users("x=pw,admin\n")


def test_session_tokens_are_signed_and_expire() -> None:
    sessions = Sessions(parse_users("admin=s3cret,1\n"), key=b"k" * 32)
    assert sessions.login("admin", "wrong") is None
    user = sessions.login("admin", "s3cret")
    assert user is not None
    token = sessions.token(user, now=1000.0)
    assert sessions.user_of(token, now=1001.0) == user
    assert sessions.user_of(token, now=1000.0 + 13 * 3600) is None  # expired
    payload, signature = token.rsplit(".", 1)
    forged = f"{payload}.{'0' * len(signature)}"
    assert sessions.user_of(forged, now=1001.0) is None
    other_key = Sessions(sessions.users, key=b"x" * 32)
    assert other_key.user_of(token, now=1001.0) is None
    assert sessions.user_of("garbage", now=1001.0) is None


def test_body_views() -> None:
    assert body_as(b'{"a": [1, 2]}', "json") == ('{\n  "a": [\n    1,\n    2\n  ]\n}', None)
    text, note = body_as(b"not json", "json")
    assert text == "not json" and note is not None and "not JSON" in note
    assert body_as("héllo".encode(), "text") == ("héllo", None)
    assert hexdump(b"AB\x00") == "00000000  41 42 00" + " " * 39 + "  AB."
    assert len(hexdump(bytes(40)).splitlines()) == 3


def test_dead_letters_as_csv() -> None:
    msg = MessageExt("%DLQ%g", b"\xff\x00", properties={"KEYS": "k1 k2", "RETRY_TOPIC": "Orders"})
    lines = messages_csv([msg]).splitlines()
    assert lines[0].split(",")[:3] == ["msgId", "offsetMsgId", "topic"]
    assert "k1 k2" in lines[1] and "base64" in lines[1] and "/wA=" in lines[1]
    assert (
        json.dumps({"KEYS": "k1 k2", "RETRY_TOPIC": "Orders"}, sort_keys=True).replace('"', '""') in lines[1]
    )


def test_command_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("NAMESRV_ADDR", raising=False)
    with pytest.raises(SystemExit) as exited:
        parse_args([])
    assert exited.value.code == 2 and "no name server address" in capsys.readouterr().err
    args = parse_args(["--namesrv", "a:9876;b:9876", "--port", "0"])
    assert (args.namesrv, args.port, args.host) == ("a:9876;b:9876", 0, "127.0.0.1")
    monkeypatch.setenv("NAMESRV_ADDR", "c:9876")
    assert parse_args([]).namesrv == "c:9876"
    with pytest.raises(SystemExit):
        parse_args(["--refresh", "0"])
