"""Unit tests of the dashboard's pure parts: trace records, the users file and session tokens,
message rendering, the command line, the history files and the group monitor's rules. No
network, no browser."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import cast

import pytest

from aiorocketmq.client import MessageExt
from aiorocketmq.dashboard.app import _perm_lines, _resources, _subject, consumptions, paged
from aiorocketmq.dashboard.cli import parse_args
from aiorocketmq.dashboard.cluster_access import ClusterAccess, TracedMessage, _account
from aiorocketmq.dashboard.history import Collector, HistoryStore, Sample, day_file
from aiorocketmq.dashboard.live import Series
from aiorocketmq.dashboard.monitor import GroupMonitor, Thresholds, breaches, load_thresholds
from aiorocketmq.dashboard.render import body_as, hexdump, messages_csv
from aiorocketmq.dashboard.trace import FIELD_SEPARATOR, TraceRecord, decode_trace, encode_record
from aiorocketmq.dashboard.users import (
    LoginThrottle,
    Sessions,
    UsersFileError,
    create_users_file,
    is_loopback,
    load_users,
    parse_users,
)


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


def test_only_loopback_hosts_count_as_loopback() -> None:
    for host in ("127.0.0.1", "127.0.0.2", "::1", "localhost"):
        assert is_loopback(host), host
    for host in ("0.0.0.0", "::", "", "192.0.2.1", "fe80::1", "no-such-host.invalid"):
        assert not is_loopback(host), host


def test_init_users_makes_one_admin_once(tmp_path: Path) -> None:
    path = tmp_path / "conf" / "users.properties"
    assert create_users_file(path)
    first = load_users(path)
    assert list(first) == ["admin"] and first["admin"].admin and len(first["admin"].password) >= 20
    assert path.stat().st_mode & 0o777 == 0o600
    # A second start keeps the file and its password.
    assert not create_users_file(path)
    assert load_users(path) == first
    other = tmp_path / "other.properties"
    create_users_file(other)
    assert load_users(other)["admin"].password != first["admin"].password


def test_beyond_loopback_needs_users(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        parse_args(["-n", "x:9876", "--host", "0.0.0.0"])
    assert "refusing to serve 0.0.0.0 without a login" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["-n", "x:9876", "--init-users"])
    assert "--init-users needs --users" in capsys.readouterr().err
    assert parse_args(["-n", "x:9876", "--host", "0.0.0.0", "--users", str(tmp_path / "u")]).host == "0.0.0.0"
    assert parse_args(["-n", "x:9876", "--host", "::", "--insecure-no-login"]).insecure_no_login
    assert parse_args(["-n", "x:9876", "--host", "localhost"]).users is None


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


def test_login_throttle_locks_an_address_or_a_name_and_doubles() -> None:
    throttle = LoginThrottle(failures=3, lockout=10.0)
    for _ in range(2):
        throttle.failed("10.0.0.1", "admin", now=0.0)
    assert throttle.locked_for("10.0.0.1", "admin", now=0.0) == 0.0
    throttle.failed("10.0.0.1", "admin", now=1.0)
    # Locked: the address for any name, and the name from any address.
    assert throttle.locked_for("10.0.0.1", "viewer", now=1.0) == 10.0
    assert throttle.locked_for("10.0.0.2", "admin", now=6.0) == 5.0
    assert throttle.locked_for("10.0.0.2", "viewer", now=1.0) == 0.0
    assert throttle.locked_for("10.0.0.1", "admin", now=11.0) == 0.0
    # The next lockout of the same address is twice as long.
    for _ in range(3):
        throttle.failed("10.0.0.1", "other", now=20.0)
    assert throttle.locked_for("10.0.0.1", "x", now=20.0) == 20.0
    # A right password clears the counts of its address and name.
    throttle.failed("10.0.0.3", "viewer", now=50.0)
    throttle.failed("10.0.0.3", "viewer", now=50.0)
    throttle.succeeded("10.0.0.3", "viewer")
    throttle.failed("10.0.0.3", "viewer", now=50.0)
    assert throttle.locked_for("10.0.0.3", "viewer", now=50.0) == 0.0


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


def test_pager_slices_and_links() -> None:
    rows = list(range(45))
    first = paged(rows, {"by": "time", "topic": "T"}, "1", "20")
    assert (first.rows, first.pages, first.near()) == (rows[:20], 3, [1, 2, 3])
    assert first.base == "by=time&topic=T&size=20"
    last = paged(rows, {}, "99", "20")  # past the end: the last page
    assert (last.page, last.rows) == (3, rows[40:])
    assert paged(rows, {}, "x", "7").size == 20  # only the offered sizes
    wide = paged(list(range(1000)), {}, "25", "20")
    assert wide.near() == [1, 23, 24, 25, 26, 27, 50]


def test_trace_consumptions_pair_before_and_after() -> None:
    def traced(record: TraceRecord) -> TracedMessage:
        return TracedMessage(record, "10.0.0.9")

    records = [
        traced(TraceRecord("Pub", "ID", 1, "shop", "T", success=True)),
        traced(TraceRecord("SubBefore", "ID", 2, "billing", request_id="r1", retry_times=0)),
        traced(TraceRecord("SubAfter", "ID", 3, "billing", cost_ms=4, success=True, request_id="r1")),
        traced(TraceRecord("SubBefore", "ID", 5, "audit", request_id="r2", retry_times=1)),
        traced(TraceRecord("SubAfter", "ID", 6, "", cost_ms=9, success=False, request_id="r3")),
    ]
    calls = consumptions(records)
    assert [(c.group, c.cost_ms, c.success, c.retry_times) for c in calls["billing"]] == [
        ("billing", 4, True, 0)
    ]
    # Still running (no SubAfter yet): no cost, no outcome.
    assert [(c.cost_ms, c.success) for c in calls["audit"]] == [(None, None)]
    # A SubAfter of an old client (no group, no SubBefore) is still shown.
    assert [(c.cost_ms, c.success) for c in calls["?"]] == [(9, False)]


def test_acl_permission_lines() -> None:
    assert _perm_lines("Orders=PUB|SUB\n Refunds = SUB ,Audit=DENY") == [
        "Orders=PUB|SUB",
        "Refunds=SUB",
        "Audit=DENY",
    ]
    for bad in ("Orders", "Orders=WRITE", "=PUB"):
        with pytest.raises(ValueError, match="Name=PERM"):
            _perm_lines(bad)


def test_acl2_form_values() -> None:
    assert _subject("app") == "User:app" and _subject(" User:app ") == "User:app"
    with pytest.raises(ValueError, match="subject"):
        _subject("User:")
    assert _resources("Topic:Orders, Group:bill*\nCluster:*\n*") == [
        "Topic:Orders",
        "Group:bill*",
        "Cluster:*",
        "*",
    ]
    for bad in ("", "Orders", "Queue:Orders", "Topic:", "topic:Orders"):
        with pytest.raises(ValueError):
            _resources(bad)


def test_acl_accounts_held_alike_merge() -> None:
    config = {"accessKey": "alice_ak", "secretKey": "s", "admin": "false", "topicPerms": ["B=SUB", "A=PUB"]}
    a, b = _account(config, "broker-a"), _account(config, "broker-b")
    assert a.same_as(b) and a.topic_perms == ["A=PUB", "B=SUB"] and not a.admin
    assert not a.same_as(_account({**config, "admin": True}, "broker-b"))


def test_a_down_broker_is_a_gap_not_its_last_rate() -> None:
    series = Series()
    series.add(1.0, 5.0)
    series.add(2.0, None)
    assert series.to_json() == [[1.0, 5.0], [2.0, None]]


def test_tls_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROCKETMQ_TLS_ENABLE", raising=False)
    plain = parse_args(["--namesrv", "a:9876"])
    assert (plain.tls, plain.tls_ca_file, plain.tls_no_verify) == (False, None, False)
    # mqadmin's spellings work too; $ROCKETMQ_TLS_ENABLE turns TLS on as for the other tools.
    args = parse_args(["--namesrv", "a:9876", "--tls", "--tlsCaFile", "ca.pem", "--tlsNoVerify"])
    assert (args.tls, args.tls_ca_file, args.tls_no_verify) == (True, "ca.pem", True)
    monkeypatch.setenv("ROCKETMQ_TLS_ENABLE", "true")
    assert parse_args(["--namesrv", "a:9876"]).tls


def _at(day: date, hour: int, minute: int = 0) -> float:
    return datetime(day.year, day.month, day.day, hour, minute).timestamp()


def test_history_line_format_round_trips() -> None:
    sample = Sample(
        1765030000.25,
        {"broker-a@10.0.0.1:10911": (12.5, 3.0), "broker-b@10.0.0.2:10911": None},
        {"Orders": (0.52, 31), "Refunds": None},
        "topics: timed out",
    )
    line = sample.to_line()
    assert "\n" not in line
    assert json.loads(line) == {
        "t": 1765030000.25,
        "brokers": {"broker-a@10.0.0.1:10911": [12.5, 3.0], "broker-b@10.0.0.2:10911": None},
        "topics": {"Orders": [0.52, 31], "Refunds": None},
        "error": "topics: timed out",
    }
    assert Sample.from_line(line) == sample
    for bad in ('{"t": 1, "brokers": {', '{"t": 1}', "[]", '{"t": 1, "brokers": {"b": [1]}, "topics": {}}'):
        with pytest.raises(ValueError, match="not a history line"):
            Sample.from_line(bad)


def test_a_day_read_back_gives_series_and_the_top_ten(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path)
    day = date(2026, 12, 5)
    store.append(Sample(_at(day, 10, 0), {"b@a:1": (4.0, 1.0)}, {f"T{i:02}": (0.1, i) for i in range(12)}))
    store.append(Sample(_at(day, 10, 1), {"b@a:1": None}, {"T00": (1.0, 60), "T11": None}))
    # A line cut short by a crash, and a blank line, are skipped, not fatal.
    with day_file(tmp_path, day).open("a") as out:
        out.write('{"t": 17650\n\n')
    store.append(Sample(_at(day, 10, 2), {"b@a:1": (2.0, 0.5)}, {"T01": (0.0, 0)}))
    history = store.read(day)
    assert (history.samples, history.skipped) == (3, 1)
    # The down sample is a gap in the broker's series, not its last rate.
    assert history.broker_put["b@a:1"] == [
        [_at(day, 10, 0), 4.0],
        [_at(day, 10, 1), None],
        [_at(day, 10, 2), 2.0],
    ]
    assert history.broker_get["b@a:1"][1] == [_at(day, 10, 1), None]
    assert history.topic_tps["T11"] == [[_at(day, 10, 0), 0.1], [_at(day, 10, 1), None]]
    # Messages add up over the day; the ten busiest, most first (ties by name).
    assert history.messages["T00"] == 60
    assert history.top() == [("T00", 60), ("T11", 11), ("T10", 10), ("T09", 9), ("T08", 8),
                             ("T07", 7), ("T06", 6), ("T05", 5), ("T04", 4), ("T03", 3)]  # fmt: skip
    assert store.read(day + timedelta(days=1)).samples == 0


def test_history_goes_to_the_file_of_its_local_day_and_old_days_are_removed(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path, keep_days=3)
    today = date(2026, 12, 6)
    for back in range(5):
        store.append(Sample(_at(today - timedelta(days=back), 23, 59)))
    store.append(Sample(_at(today, 0, 0)))
    assert day_file(tmp_path, today).read_text().count("\n") == 2
    (tmp_path / "monitors.json").write_text("{}")
    (tmp_path / "tps-notes.jsonl").write_text("")
    assert store.days() == [today - timedelta(days=n) for n in range(5)]
    removed = store.prune(today)
    assert sorted(p.name for p in removed) == ["tps-2026-12-02.jsonl", "tps-2026-12-03.jsonl"]
    assert store.days() == [today, today - timedelta(days=1), today - timedelta(days=2)]
    # Only day files go: what else the folder holds stays.
    assert (tmp_path / "monitors.json").exists() and (tmp_path / "tps-notes.jsonl").exists()
    assert store.prune(today) == []
    assert HistoryStore(tmp_path / "none").days() == []


class _SilentCluster:
    """What :class:`Collector` asks of the cluster, with the name server not answering."""

    seen_brokers = {"10.0.0.1:10911": ("DefaultCluster", "broker-a", 0)}

    async def brokers(self) -> None:
        raise ConnectionRefusedError("name server 10.0.0.9:9876 refused the connection")

    async def topics(self, with_routes: bool = True) -> None:
        raise ConnectionRefusedError("name server 10.0.0.9:9876 refused the connection")


async def test_the_collector_records_a_silent_cluster_and_survives_a_bad_folder(tmp_path: Path) -> None:
    checks: list[int] = []

    async def check() -> None:
        checks.append(1)

    collector = Collector(cast(ClusterAccess, _SilentCluster()), HistoryStore(tmp_path), after_sample=check)
    await collector.round()
    (sample,) = history_of(tmp_path)
    # The broker seen before is down, not at its last rate; the line says why.
    assert sample.brokers == {"broker-a@10.0.0.1:10911": None} and sample.topics == {}
    assert sample.error is not None and sample.error.startswith("name server: ")
    # A folder that cannot be written is a logged failure; the monitor still runs.
    (tmp_path / "blocker").write_text("")
    collector.store = HistoryStore(tmp_path / "blocker" / "history")
    await collector.round()
    assert collector.last_error is not None and collector.rounds == 2 and len(checks) == 2


def history_of(folder: Path) -> list[Sample]:
    return [
        Sample.from_line(line)
        for f in sorted(folder.glob("tps-*.jsonl"))
        for line in f.read_text().splitlines()
    ]


def test_monitor_thresholds_breached() -> None:
    both = Thresholds(min_consumers=2, max_lag=100)
    assert breaches(both, 1, 101) == {
        "min_consumers": "1 consumers online, fewer than the minimum 2",
        "max_lag": "lag 101, above the maximum 100",
    }
    assert breaches(both, 2, 100) == {"min_consumers": None, "max_lag": None}
    # A figure the cluster did not give is no verdict either way.
    assert breaches(both, None, None) == {}
    assert breaches(Thresholds(max_lag=0), 0, 1) == {"max_lag": "lag 1, above the maximum 0"}


def test_monitor_logs_each_alarm_once_when_it_starts_and_when_it_clears(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "data" / "monitors.json"
    monitor = GroupMonitor(cast(ClusterAccess, None), path)  # no check runs: the cluster is not needed
    monitor.set("billing", Thresholds(min_consumers=1, max_lag=10))
    monitor.set("audit", Thresholds(max_lag=5))
    assert load_thresholds(path) == {"billing": Thresholds(1, 10), "audit": Thresholds(None, 5)}
    caplog.set_level(logging.WARNING, logger="aiorocketmq.dashboard.monitor")
    for _ in range(3):
        monitor.update("billing", breaches(monitor.limits("billing"), 0, 3))
    assert monitor.alarms == {"billing": {"min_consumers": "0 consumers online, fewer than the minimum 1"}}
    monitor.update("billing", breaches(monitor.limits("billing"), None, 3))  # unknown: still in alarm
    monitor.update("billing", breaches(monitor.limits("billing"), 1, 30))
    monitor.update("billing", breaches(monitor.limits("billing"), 1, 31))
    monitor.update("billing", breaches(monitor.limits("billing"), 2, 0))
    assert monitor.alarms == {}
    assert [r.getMessage() for r in caplog.records] == [
        "consumer group billing in alarm: 0 consumers online, fewer than the minimum 1",
        "consumer group billing: alarm cleared, min_consumers is within its threshold",
        "consumer group billing in alarm: lag 30, above the maximum 10",
        "consumer group billing: alarm cleared, max_lag is within its threshold",
    ]
    assert all(r.levelno == logging.WARNING for r in caplog.records)
    # Dropping a threshold clears its alarm; dropping both stops monitoring the group.
    monitor.update("audit", breaches(monitor.limits("audit"), None, 9))
    monitor.set("audit", Thresholds())
    assert "audit" not in monitor.alarms and load_thresholds(path) == {"billing": Thresholds(1, 10)}
    assert (
        caplog.records[-1].getMessage()
        == "consumer group audit: alarm cleared, max_lag is no longer monitored"
    )
    # A broken settings file is reported, not fatal.
    path.write_text("{not json")
    assert GroupMonitor(cast(ClusterAccess, None), path).load_error is not None


async def test_a_monitor_check_outlived_by_its_thresholds_changes_no_alarm(tmp_path: Path) -> None:
    """Thresholds cleared while a check waits on the cluster: its outcome is dropped, so no
    alarm is left on a group nobody checks any more."""
    asked, answer = asyncio.Event(), asyncio.Event()

    class SlowCluster(GroupMonitor):
        async def _consumers(self, group: str) -> int | None:
            asked.set()
            await answer.wait()
            return 0

    monitor = SlowCluster(cast(ClusterAccess, None), tmp_path / "monitors.json")
    monitor.set("billing", Thresholds(min_consumers=1))
    check = asyncio.ensure_future(monitor.check_group("billing"))
    await asked.wait()
    monitor.set("billing", Thresholds())
    answer.set()
    await check
    assert monitor.alarms == {}
    # Left alone, the same check does raise the alarm.
    monitor.set("billing", Thresholds(min_consumers=1))
    await monitor.check_group("billing")
    assert monitor.alarms == {"billing": {"min_consumers": "0 consumers online, fewer than the minimum 1"}}


def test_history_options(tmp_path: Path) -> None:
    args = parse_args(["--namesrv", "a:9876"])
    assert (args.collect_interval, args.history_days) == (60.0, 7)
    assert args.data_dir == Path.home() / ".aiorocketmq" / "dashboard"
    args = parse_args(["--namesrv", "a:9876", "--data-dir", str(tmp_path), "--collect-interval", "0"])
    assert (args.data_dir, args.collect_interval) == (tmp_path, 0.0)
    for bad in (["--collect-interval", "-1"], ["--history-days", "0"]):
        with pytest.raises(SystemExit):
            parse_args(["--namesrv", "a:9876", *bad])
