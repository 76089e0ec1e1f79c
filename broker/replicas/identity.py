"""The broker id a controller gave this broker, kept under the store (Apache's
``BrokerMetadata`` and ``TempBrokerMetadata`` files, same format)."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)


class BrokerIdentityFile:
    """Apache's ``BrokerMetadata`` (``cluster#name#id``) and, with ``temp``, its
    ``TempBrokerMetadata`` (``cluster#name#id#registerCheckCode``): the broker id a controller
    gave this broker, kept under the store so a restart keeps it."""

    def __init__(self, path: Path, *, temp: bool = False) -> None:
        self.path = path
        self.temp = temp
        self.cluster_name: str | None = None
        self.broker_name: str | None = None
        self.broker_id: int | None = None
        self.register_check_code: str | None = None

    @property
    def loaded(self) -> bool:
        return (
            bool(self.cluster_name)
            and bool(self.broker_name)
            and self.broker_id is not None
            and (not self.temp or bool(self.register_check_code))
        )

    def read(self) -> bool:
        """Load the file (absent or unreadable: not loaded); True when loaded."""
        self._clear_in_memory()
        try:
            text = self.path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return False
        except OSError as exc:
            log.error("cannot read the broker id file %s: %s", self.path, exc)
            return False
        parts = text.split("#")
        try:
            self.cluster_name, self.broker_name, self.broker_id = parts[0], parts[1], int(parts[2])
            if self.temp:
                self.register_check_code = parts[3]
        except (IndexError, ValueError):
            log.error("the broker id file %s is not usable: %r", self.path, text)
            self._clear_in_memory()
        return self.loaded

    def persist(
        self, cluster_name: str, broker_name: str, broker_id: int, check_code: str | None = None
    ) -> None:
        self.cluster_name, self.broker_name, self.broker_id = cluster_name, broker_name, broker_id
        self.register_check_code = check_code
        fields = [cluster_name, broker_name, str(broker_id)]
        if self.temp:
            fields.append(check_code or "")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        scratch = self.path.with_name(self.path.name + ".writing")
        with open(scratch, "w", encoding="utf-8") as out:
            out.write("#".join(fields))
            out.flush()
            os.fsync(out.fileno())
        os.replace(scratch, self.path)

    def clear(self) -> None:
        self._clear_in_memory()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def _clear_in_memory(self) -> None:
        self.cluster_name = self.broker_name = self.broker_id = self.register_check_code = None

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.path}, cluster={self.cluster_name}, name={self.broker_name}, "
            f"id={self.broker_id}{', code=' + str(self.register_check_code) if self.temp else ''})"
        )
