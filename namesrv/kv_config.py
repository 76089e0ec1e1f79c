"""KV config: namespaced key/value settings the name server keeps for clients and admins
(``ORDER_TOPIC_CONFIG`` maps a topic to ``"brokerA:4;brokerB:4"``), persisted to
``kvConfig.json`` as ``{"configTable":{namespace:{key:value}}}`` like the Java name server.

Writes are atomic (temp file, fsync, rename) and keep the previous good file as
``kvConfig.json.bak``; a corrupt or empty file falls back to that backup with a warning instead
of stopping the server. Disk work runs in a thread so the event loop never waits on fsync.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

Table = dict[str, dict[str, str]]


class KVConfigError(ValueError):
    """A kvConfig.json whose content is not a KV table."""


def encode_table(table: Table) -> bytes:
    # Java writes this file pretty-printed; people read and occasionally edit it.
    return (json.dumps({"configTable": table}, indent=4, sort_keys=True, ensure_ascii=False) + "\n").encode()


def decode_table(data: bytes) -> Table:
    """Parse a kvConfig.json; raises :class:`KVConfigError` saying what is wrong."""
    if not data.strip():
        raise KVConfigError("file is empty")
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise KVConfigError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise KVConfigError(f"top level is a {type(doc).__name__}, not an object")
    raw = doc.get("configTable")
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise KVConfigError(f"configTable is a {type(raw).__name__}, not an object")
    table: Table = {}
    for namespace, entries in raw.items():
        if not isinstance(entries, dict):
            raise KVConfigError(f"namespace {namespace!r} is a {type(entries).__name__}, not an object")
        values: dict[str, str] = {}
        for key, value in entries.items():
            if isinstance(value, (dict, list)) or value is None:
                raise KVConfigError(f"{namespace}/{key} is not a scalar")
            values[key] = value if isinstance(value, str) else json.dumps(value)
        if values:
            table[namespace] = values
    return table


def backup_path(path: Path) -> Path:
    return path.with_name(path.name + ".bak")


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so a crash leaves either the old or the new file, and
    keep the old one (when it was readable) as ``.bak``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        previous: bytes | None = path.read_bytes()
    except FileNotFoundError:
        previous = None
    if previous is not None and _is_valid(previous):
        _replace(backup_path(path), previous)
    _replace(path, data)


def _replace(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _is_valid(data: bytes) -> bool:
    try:
        decode_table(data)
    except KVConfigError:
        return False
    return True


def load_table(path: Path) -> Table:
    """The table stored at ``path``, falling back to its ``.bak``; never raises for bad
    content (a file that cannot be used is logged, set aside as ``.corrupt`` and skipped)."""
    problem: str | None
    try:
        table = decode_table(path.read_bytes())
    except FileNotFoundError:
        problem = "missing"
    except OSError as exc:
        problem = f"unreadable ({exc.strerror or exc})"
    except KVConfigError as exc:
        problem = f"unusable ({exc})"
        corrupt = path.with_name(path.name + ".corrupt")
        try:
            os.replace(path, corrupt)
            problem += f"; moved aside to {corrupt}"
        except OSError as move_error:
            log.warning("cannot move %s aside: %s", path, move_error)
    else:
        log.info("loaded %d KV config namespaces from %s", len(table), path)
        return table

    bak = backup_path(path)
    try:
        table = decode_table(bak.read_bytes())
    except FileNotFoundError:
        if problem == "missing":
            log.info("no KV config at %s yet; starting empty", path)
        else:
            log.error("KV config %s is %s and there is no backup; starting empty", path, problem)
        return {}
    except (OSError, KVConfigError) as exc:
        log.error(
            "KV config %s is %s and its backup %s is unusable (%s); starting empty", path, problem, bak, exc
        )
        return {}
    log.warning("KV config %s is %s; loaded %d namespaces from backup %s", path, problem, len(table), bak)
    return table


class KVConfig:
    """Namespaced key/value pairs, held in memory and persisted on every change."""

    def __init__(self, path: Path, table: Table | None = None) -> None:
        self.path = path
        self._table: Table = table if table is not None else {}
        self._version = 0
        self._written = 0
        self._lock = asyncio.Lock()

    @classmethod
    def load(cls, path: Path) -> KVConfig:
        return cls(path, load_table(path))

    def put(self, namespace: str, key: str, value: str) -> None:
        self._table.setdefault(namespace, {})[key] = value
        self._version += 1

    def get(self, namespace: str, key: str) -> str | None:
        return self._table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> bool:
        entries = self._table.get(namespace)
        if entries is None or key not in entries:
            return False
        del entries[key]
        if not entries:
            del self._table[namespace]
        self._version += 1
        return True

    def namespace(self, namespace: str) -> dict[str, str]:
        return dict(self._table.get(namespace, {}))

    def snapshot(self) -> dict[str, Any]:
        return {ns: dict(entries) for ns, entries in self._table.items()}

    @property
    def dirty(self) -> bool:
        return self._written < self._version

    async def persist(self) -> None:
        """Write the table if it changed since the last write; concurrent callers share one
        write that covers all of their changes."""
        wanted = self._version
        async with self._lock:
            if self._written >= wanted:
                return
            version = self._version
            data = encode_table(self.snapshot())
            await asyncio.to_thread(write_atomic, self.path, data)
            self._written = version
