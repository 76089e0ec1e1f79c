"""The epoch file of controller mode (Apache's ``epochFileCheckpoint``) and the search for the
point up to which a slave's log agrees with its master's; the HA port's message layouts."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from aiorocketmq.broker.ha.autoswitch import wire
from aiorocketmq.broker.ha.autoswitch.epoch import (
    OPEN_END,
    Epoch,
    EpochFileCache,
    decode_file,
    encode_file,
    epoch_file_path,
)
from aiorocketmq.broker.store import StoreConfig


def cache(*entries: tuple[int, int], last_end: int | None = None) -> EpochFileCache:
    result = EpochFileCache()
    for epoch, start in entries:
        assert result.append(epoch, start)
    if last_end is not None:
        result.set_last_end(last_end)
    return result


def test_the_file_is_apaches_checkpoint_format(tmp_path: Path) -> None:
    # Apache's CheckpointFile documents this very example (2 entries, CRC 773307083).
    assert encode_file([Epoch(7, 7000), Epoch(8, 8000)]) == "2\n773307083\n7-7000\n8-8000\n"
    assert decode_file("2\n773307083\n7-7000\n8-8000\n") == [Epoch(7, 7000), Epoch(8, 8000)]
    with pytest.raises(ValueError, match="CRC"):
        decode_file("2\n773307084\n7-7000\n8-8000\n")
    with pytest.raises(ValueError, match="announced"):
        decode_file("3\n773307083\n7-7000\n8-8000\n")
    # A CRC of 0 is not checked (Apache's NOT_CHECK_CRC_MAGIC_CODE).
    assert decode_file("1\n0\n3-42\n") == [Epoch(3, 42)]


def test_the_file_lives_under_the_store_root_unless_configured(tmp_path: Path) -> None:
    config = StoreConfig.model_validate({"storePathRootDir": str(tmp_path)})
    assert epoch_file_path(config) == tmp_path / "epochFileCheckpoint"


def test_entries_survive_a_reload_and_a_damaged_file_falls_back_to_the_backup(tmp_path: Path) -> None:
    path = tmp_path / "epochFileCheckpoint"
    epochs = EpochFileCache(path)
    assert epochs.append(1, 100) and epochs.append(2, 300) and epochs.append(3, 500)
    assert path.read_text() == encode_file([Epoch(1, 100), Epoch(2, 300), Epoch(3, 500)])
    backup = path.with_name("epochFileCheckpoint.bak")
    assert backup.read_text() == encode_file([Epoch(1, 100), Epoch(2, 300)])
    again = EpochFileCache(path)
    again.load()
    assert again.entries() == [Epoch(1, 100, 300), Epoch(2, 300, 500), Epoch(3, 500, OPEN_END)]
    path.write_text("3\n1\n1-100\n2-300\n3-500\n")  # wrong CRC: the backup is read
    damaged = EpochFileCache(path)
    damaged.load()
    assert [(e.epoch, e.start) for e in damaged.entries()] == [(1, 100), (2, 300)]
    # Emptied, both files go (Apache would leave the old file, which would come back).
    damaged.truncate_suffix_by_offset(0)
    assert not path.exists() and not backup.exists()


def test_append_needs_a_bigger_epoch_and_start() -> None:
    epochs = cache((1, 100), (2, 300))
    assert not epochs.append(2, 400)  # same epoch
    assert not epochs.append(3, 300)  # same start: epoch 2 wrote nothing
    assert epochs.last_epoch == 2
    assert epochs.append(3, 500)
    assert epochs.get(2) == Epoch(2, 300, 500)
    assert epochs.find_by_offset(350) == Epoch(2, 300, 500)
    assert epochs.find_by_offset(99) is None
    assert epochs.find_by_offset(10**12) == Epoch(3, 500, OPEN_END)
    assert epochs.next_after(1) == Epoch(2, 300, 500)
    assert EpochFileCache().last_epoch == -1


def test_truncation_by_offset_and_epoch_reopens_the_last_entry() -> None:
    epochs = cache((1, 100), (2, 300), (3, 500))
    epochs.truncate_suffix_by_offset(150)
    assert epochs.entries() == [Epoch(1, 100, OPEN_END)]
    epochs = cache((1, 100), (2, 300), (3, 500))
    epochs.truncate_suffix_by_epoch(2)
    assert epochs.entries() == [Epoch(1, 100, OPEN_END)]
    epochs = cache((1, 100), (2, 300), (3, 500))
    epochs.truncate_prefix_by_offset(300)  # entries ending at or before 300
    assert [e.epoch for e in epochs.entries()] == [2, 3]


@pytest.mark.parametrize(
    ("mine", "theirs", "point"),
    [
        # The slave's last epoch went further than the master's record of it.
        (cache((1, 100), (2, 300), (3, 500)), cache((1, 100), (2, 300), (3, 450)), 450),
        # Same epochs, the master's log ends first.
        (
            cache((1, 100), (2, 300), (3, 500), last_end=700),
            cache((1, 100), (2, 300), (3, 500), last_end=600),
            600,
        ),
        # Nothing in common.
        (cache((1, 100), (2, 300), (3, 500)), cache((1, 200), (2, 500)), -1),
        # The master moved on to epoch 4; the slave has all of epoch 3 it knows of.
        (
            cache((1, 100), (2, 300), (3, 500), (4, 800)),
            cache((1, 100), (2, 300), (3, 500), last_end=700),
            700,
        ),
        # An old master wrote on under epoch 1 after the new one took over at 250.
        (cache((1, 0), last_end=400), cache((1, 0), (2, 250), last_end=900), 250),
    ],
)
def test_consistent_point(mine: EpochFileCache, theirs: EpochFileCache, point: int) -> None:
    assert mine.find_consistent_point(theirs) == point


def test_the_ha_port_layouts_are_apaches() -> None:
    assert wire.encode_slave_handshake(7, sync_from_last_file=True) == struct.pack(">ihhq", 1, 1, 0, 7)
    assert wire.encode_report(12345) == struct.pack(">iq", 2, 12345)
    handshake = wire.encode_master_handshake(900, 2, [(1, 0), (2, 250)])
    assert handshake == struct.pack(">iiqi", 1, 24, 900, 2) + struct.pack(">iq", 1, 0) + struct.pack(
        ">iq", 2, 250
    )
    header = wire.encode_transfer_header(250, 10, 2, 250, 240)
    assert header == struct.pack(">iiqiqq", 2, 10, 250, 2, 250, 240) and len(header) == 36
    master = wire.MasterMessageReader()
    stream = handshake + header + b"0123456789"
    got = []
    for i in range(len(stream)):  # byte by byte: messages complete only when whole
        got.extend(master.feed(stream[i : i + 1]))
    assert got[0] == (900, 2, [(1, 0), (2, 250)])
    assert got[1] == (wire.TransferHeader(250, 2, 250, 240, 10), b"0123456789")
    slave = wire.SlaveMessageReader()
    messages = slave.feed(wire.encode_slave_handshake(3) + wire.encode_report(5)[:7])
    assert messages == [wire.SlaveHandshake(3)]
    assert slave.feed(wire.encode_report(5)[7:]) == [5]
    with pytest.raises(ValueError):
        slave.feed(struct.pack(">iq", 9, 0))
