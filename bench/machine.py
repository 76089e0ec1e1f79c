"""The machine a benchmark ran on, as far as it moves the figures.

Every benchmark prints :func:`summary` with its results (``tests/ops/test_doc_references.py``
keeps it so), so a figure comes with the conditions it was measured under. Beyond the CPU and kernel, two settings of a
virtual machine moved our results by more than any code change did (``docs/performance.md``;
``docs/sdk.md``):

* **Guest halt polling.** A KVM guest's ``haltpoll`` cpuidle driver polls for up to
  ``guest_halt_poll_ns`` before it halts an idle virtual CPU. With it at 0, an idle CPU halts
  at once and every wake-up goes through the hypervisor; in profiles the waker pays for it
  inside its ``write``. One message at a time, that costs more than half of a round trip: on
  the development VM our SDK's one-at-a-time sends went from 8.7k/s to 21.4k/s, and
  redis-py's ``XADD`` from 11.9k/s to 33.0k/s, when it was set to 200 µs.
* **Free page reporting** (virtio balloon): freed guest memory goes back to the host within
  seconds, and the first touch of each such page is a fault in the hypervisor. A store's
  fresh page-cache pages pay it (``bench/page_touch.py``).

Reads ``/proc`` and ``/sys`` under ``root`` (the tests point it at a tree of their own).
Nothing missing is an error: a setting the machine does not have is reported as absent.
"""

from __future__ import annotations

import os
from pathlib import Path

#: virtio's device id of a memory balloon, and its VIRTIO_BALLOON_F_REPORTING feature bit.
_BALLOON = 5
_F_REPORTING = 5
_ABSENT = "n/a"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def cpu_model(root: Path = Path("/")) -> str:
    """The first ``model name`` in ``/proc/cpuinfo``."""
    text = _read(root / "proc/cpuinfo") or ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model name" and value.strip():
            return " ".join(value.split())
    return _ABSENT


def cpuidle(root: Path = Path("/")) -> str:
    """The cpuidle driver and governor, as ``driver/governor``."""
    base = root / "sys/devices/system/cpu/cpuidle"
    driver = _read(base / "current_driver") or _ABSENT
    governor = _read(base / "current_governor") or _read(base / "current_governor_ro") or _ABSENT
    return f"{driver}/{governor}"


def guest_halt_poll(root: Path = Path("/")) -> str:
    """The haltpoll driver's longest poll before halting an idle CPU, or ``n/a`` without it."""
    value = _read(root / "sys/module/haltpoll/parameters/guest_halt_poll_ns")
    if value is None:
        return _ABSENT
    if not value.isdigit():
        return value
    return f"{int(value) / 1000:g} us" + (" (off)" if int(value) == 0 else "")


def free_page_reporting(root: Path = Path("/")) -> str:
    """``on`` or ``off`` (as negotiated) for a virtio balloon, ``no balloon device`` if none."""
    for device in sorted((root / "sys/bus/virtio/devices").glob("*")):
        kind = _read(device / "device")
        features = _read(device / "features")
        if kind is None or features is None:
            continue
        try:
            if int(kind, 16) != _BALLOON:
                continue
        except ValueError:
            continue
        return "on" if len(features) > _F_REPORTING and features[_F_REPORTING] == "1" else "off"
    return "no balloon device"


def transparent_hugepages(root: Path = Path("/")) -> str:
    """The bracketed (active) choice of ``transparent_hugepage/enabled``."""
    text = _read(root / "sys/kernel/mm/transparent_hugepage/enabled")
    if text is None:
        return _ABSENT
    for word in text.split():
        if word.startswith("[") and word.endswith("]"):
            return word[1:-1]
    return text


def describe(root: Path = Path("/")) -> dict[str, str]:
    """Everything :func:`summary` prints, by name."""
    return {
        "cpu": cpu_model(root),
        "cpus": str(os.cpu_count() or _ABSENT),
        "kernel": os.uname().release,
        "cpuidle": cpuidle(root),
        "guest halt polling": guest_halt_poll(root),
        "free page reporting": free_page_reporting(root),
        "THP": transparent_hugepages(root),
    }


def summary(root: Path = Path("/")) -> str:
    """One line: ``machine: cpu ...; cpus 2; kernel ...; ...``."""
    return "machine: " + "; ".join(f"{name} {value}" for name, value in describe(root).items())


if __name__ == "__main__":
    print(summary())
