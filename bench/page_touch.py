"""What faulting in fresh commit-log pages costs on this machine, and why it varies.

Run ``python -m bench.page_touch`` (``--mib N``, ``--runs N``, ``--pause S``). Not part of the
test suite.

The broker's prepare thread faults the commit log's next pages in with
``MADV_POPULATE_WRITE`` on a ``posix_fallocate``'d file (``docs/store.md``). Its CPU per MiB
swings by an order of magnitude between runs of the same load: the kernel's own work is
small; what costs is the first touch of guest memory that the host has taken back. A VM whose
balloon device does *free page reporting* hands freed guest pages to the host a few seconds
after they are freed; the next page cache page built on one is a fault in the hypervisor too.
Apache RocketMQ's writer should pay the same on its own thread, through its mapped-file
faults (this probe does not measure it).

Each run does this twice: touch and free 4 x ``--mib`` of anonymous memory, then fault in
``--mib`` of a fresh fallocated file in 4 MiB calls, as the broker does; once straight away
(much of the freed memory is still backed) and once after ``--pause`` seconds (by then
reported). Prints the CPU milliseconds per MiB of each, the medians of the runs, and the
machine line of ``bench/machine.py`` (free page reporting among it). Needs about 4 x
``--mib`` of free memory (2 GiB by default) and a disk-backed ``--dir`` (on tmpfs,
``posix_fallocate`` itself makes the pages, and the timed calls only map them).
"""

from __future__ import annotations

import argparse
import errno
import mmap
import os
import statistics
import tempfile
import time
from pathlib import Path

from bench.machine import summary

#: linux/mman.h (Linux 5.14+); Python's mmap module does not name it.
MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)
_CALL = 4 << 20


def touch_and_free(size: int) -> None:
    """Back ``size`` bytes of anonymous memory with real pages, then free them."""
    with mmap.mmap(-1, size) as block:
        for offset in range(0, size, mmap.PAGESIZE):
            block[offset] = 1


def populate(directory: Path, size: int) -> float:
    """CPU seconds to fault in every page of a fresh fallocated file of ``size`` bytes."""
    path = directory / "page-touch"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.posix_fallocate(fd, 0, size)
        with mmap.mmap(fd, size) as mapping:
            began = time.process_time()
            for offset in range(0, size, _CALL):
                try:
                    mapping.madvise(MADV_POPULATE_WRITE, offset, min(_CALL, size - offset))
                except OSError as exc:
                    if exc.errno == errno.EINVAL:
                        raise SystemExit("MADV_POPULATE_WRITE is not supported here (Linux 5.14+)") from None
                    raise
            return time.process_time() - began
    finally:
        os.close(fd)
        path.unlink()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mib", type=int, default=512, help="size of the file faulted in (default 512)")
    parser.add_argument("--runs", type=int, default=3, help="runs, each measuring both (default 3)")
    parser.add_argument("--pause", type=float, default=15.0, help="seconds before the second touch")
    parser.add_argument(
        "--dir", type=Path, default=Path.cwd(), help="disk-backed directory for the file (default: here)"
    )
    args = parser.parse_args()
    if args.mib < 1 or args.runs < 1 or args.pause < 0:
        parser.error("--mib and --runs must be at least 1, --pause not negative")
    size = args.mib << 20
    at_once: list[float] = []
    paused: list[float] = []
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        for run in range(args.runs):
            for pause, into in ((0.0, at_once), (args.pause, paused)):
                touch_and_free(4 * size)
                time.sleep(pause)
                into.append(populate(Path(tmp), size) / args.mib)
                print(
                    f"run {run + 1}: {pause:4.1f} s after freeing: {into[-1] * 1e3:.2f} ms CPU/MiB",
                    flush=True,
                )
    print(summary())
    print(f"fault-in at once:       {statistics.median(at_once) * 1e3:.2f} ms CPU per MiB (median)")
    print(f"fault-in after {args.pause:g} s:  {statistics.median(paused) * 1e3:.2f} ms CPU per MiB (median)")


if __name__ == "__main__":
    main()
