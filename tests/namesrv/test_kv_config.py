"""KV config: the table, its file format, atomic writes and the fallback to the backup."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from aiorocketmq.namesrv.kv_config import (
    KVConfig,
    KVConfigError,
    backup_path,
    decode_table,
    encode_table,
    load_table,
    write_atomic,
)


def test_table_operations() -> None:
    kv = KVConfig(Path("unused"))
    assert not kv.dirty
    kv.put("ns", "k", "v")
    kv.put("ns", "k2", "v2")
    assert kv.dirty
    assert kv.get("ns", "k") == "v"
    assert kv.get("ns", "missing") is None
    assert kv.get("other", "k") is None
    assert kv.namespace("ns") == {"k": "v", "k2": "v2"}
    assert kv.delete("ns", "k")
    assert not kv.delete("ns", "k")
    assert kv.delete("ns", "k2")
    assert kv.namespace("ns") == {}
    assert kv.snapshot() == {}


def test_file_format_is_javas() -> None:
    data = encode_table({"ORDER_TOPIC_CONFIG": {"T": "broker-a:4"}})
    assert json.loads(data) == {"configTable": {"ORDER_TOPIC_CONFIG": {"T": "broker-a:4"}}}
    assert decode_table(data) == {"ORDER_TOPIC_CONFIG": {"T": "broker-a:4"}}
    # Java writes this file with fastjson; it may come compact and with numbers
    assert decode_table(b'{"configTable":{"ns":{"a":1,"b":"x"}}}') == {"ns": {"a": "1", "b": "x"}}
    assert decode_table(b"{}") == {}


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "empty"),
        (b"  \n", "empty"),
        (b"{not json", "not JSON"),
        (b"[1, 2]", "top level is a list"),
        (b'{"configTable": []}', "configTable is a list"),
        (b'{"configTable": {"ns": "v"}}', "namespace 'ns' is a str"),
        (b'{"configTable": {"ns": {"k": {"x": 1}}}}', "ns/k is not a scalar"),
        (b"\xff\xfe", "not JSON"),
    ],
)
def test_decode_rejects_what_is_not_a_table(data: bytes, problem: str) -> None:
    with pytest.raises(KVConfigError, match=problem):
        decode_table(data)


def test_write_atomic_keeps_the_previous_good_file_as_backup(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "kvConfig.json"
    write_atomic(path, encode_table({"ns": {"k": "1"}}))
    assert decode_table(path.read_bytes()) == {"ns": {"k": "1"}}
    assert not backup_path(path).exists()
    write_atomic(path, encode_table({"ns": {"k": "2"}}))
    assert decode_table(path.read_bytes()) == {"ns": {"k": "2"}}
    assert decode_table(backup_path(path).read_bytes()) == {"ns": {"k": "1"}}
    # a corrupt current file never overwrites a good backup
    path.write_bytes(b"garbage")
    write_atomic(path, encode_table({"ns": {"k": "3"}}))
    assert decode_table(backup_path(path).read_bytes()) == {"ns": {"k": "1"}}
    assert sorted(p.name for p in path.parent.iterdir()) == ["kvConfig.json", "kvConfig.json.bak"]


def test_load_missing_file_starts_empty(tmp_path: Path) -> None:
    assert load_table(tmp_path / "kvConfig.json") == {}


@pytest.mark.parametrize("bad", [b"", b'{"configTable": {"ns": {"k"'])
def test_load_falls_back_to_backup(tmp_path: Path, caplog: pytest.LogCaptureFixture, bad: bytes) -> None:
    path = tmp_path / "kvConfig.json"
    backup_path(path).write_bytes(encode_table({"ns": {"k": "old"}}))
    path.write_bytes(bad)
    with caplog.at_level(logging.WARNING, logger="namesrv.kv_config"):
        assert load_table(path) == {"ns": {"k": "old"}}
    assert "loaded 1 namespaces from backup" in caplog.text
    # the unusable file is kept for inspection, not overwritten by the next write
    assert (tmp_path / "kvConfig.json.corrupt").read_bytes() == bad
    assert not path.exists()


def test_load_with_no_usable_file_starts_empty_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "kvConfig.json"
    path.write_bytes(b"{broken")
    backup_path(path).write_bytes(b"also broken")
    with caplog.at_level(logging.WARNING, logger="namesrv.kv_config"):
        assert load_table(path) == {}
    assert "its backup" in caplog.text and "starting empty" in caplog.text


async def test_persist_writes_once_for_concurrent_changes(tmp_path: Path) -> None:
    path = tmp_path / "kvConfig.json"
    kv = KVConfig.load(path)
    kv.put("ns", "a", "1")
    first = asyncio.ensure_future(kv.persist())
    await asyncio.sleep(0)  # let the first write take the lock
    kv.put("ns", "b", "2")
    second = asyncio.ensure_future(kv.persist())
    third = asyncio.ensure_future(kv.persist())
    await asyncio.gather(first, second, third)
    assert not kv.dirty
    assert decode_table(path.read_bytes()) == {"ns": {"a": "1", "b": "2"}}
    # two writes at most: the first one and one covering both later callers
    assert decode_table(backup_path(path).read_bytes()) == {"ns": {"a": "1"}}
    assert KVConfig.load(path).namespace("ns") == {"a": "1", "b": "2"}


async def test_persist_failure_leaves_the_change_pending(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    kv = KVConfig(blocker / "kvConfig.json")  # parent is a file: every write fails
    kv.put("ns", "k", "v")
    with pytest.raises(OSError):
        await kv.persist()
    assert kv.dirty
    kv.path = tmp_path / "kvConfig.json"
    await kv.persist()
    assert not kv.dirty
    assert decode_table(kv.path.read_bytes()) == {"ns": {"k": "v"}}
