"""``bench/machine.py`` reads the settings that move our benchmark figures from /proc and /sys;
here it reads a tree built for each case, so every branch is seen on any machine."""

from __future__ import annotations

from pathlib import Path

from bench import machine


def write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def kvm_guest(root: Path, *, halt_poll_ns: str, features: str) -> None:
    write(root, "proc/cpuinfo", "processor\t: 0\nmodel name\t: AMD  EPYC   9B14\n\nprocessor\t: 1\n")
    write(root, "sys/devices/system/cpu/cpuidle/current_driver", "haltpoll\n")
    write(root, "sys/devices/system/cpu/cpuidle/current_governor", "haltpoll\n")
    write(root, "sys/module/haltpoll/parameters/guest_halt_poll_ns", f"{halt_poll_ns}\n")
    write(root, "sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n")
    # A network device first: only the balloon's features count.
    write(root, "sys/bus/virtio/devices/virtio0/device", "0x0001\n")
    write(root, "sys/bus/virtio/devices/virtio0/features", "1" * 64 + "\n")
    write(root, "sys/bus/virtio/devices/virtio1/device", "0x0005\n")
    write(root, "sys/bus/virtio/devices/virtio1/features", features + "\n")


def test_a_kvm_guest_without_halt_polling(tmp_path: Path) -> None:
    kvm_guest(tmp_path, halt_poll_ns="0", features="0000010000")
    described = machine.describe(tmp_path)
    assert described["cpu"] == "AMD EPYC 9B14"
    assert described["cpuidle"] == "haltpoll/haltpoll"
    assert described["guest halt polling"] == "0 us (off)"
    assert described["free page reporting"] == "on"
    assert described["THP"] == "madvise"
    line = machine.summary(tmp_path)
    assert line.startswith("machine: cpu AMD EPYC 9B14; cpus ")
    assert "guest halt polling 0 us (off)" in line


def test_halt_polling_on_and_no_page_reporting(tmp_path: Path) -> None:
    kvm_guest(tmp_path, halt_poll_ns="200000", features="1111101111")
    assert machine.guest_halt_poll(tmp_path) == "200 us"
    assert machine.free_page_reporting(tmp_path) == "off"


def test_bare_metal_has_none_of_it(tmp_path: Path) -> None:
    write(tmp_path, "sys/devices/system/cpu/cpuidle/current_driver", "intel_idle\n")
    write(tmp_path, "sys/devices/system/cpu/cpuidle/current_governor_ro", "menu\n")
    described = machine.describe(tmp_path)
    assert described["cpu"] == "n/a"
    assert described["cpuidle"] == "intel_idle/menu"
    assert described["guest halt polling"] == "n/a"
    assert described["free page reporting"] == "no balloon device"
    assert described["THP"] == "n/a"


def test_the_real_machine_reads_without_error() -> None:
    line = machine.summary()
    assert line.startswith("machine: cpu ")
    assert "; kernel " in line
