"""Process and port helpers the benchmark scripts share: a port to start a server on, waiting
for it to listen, and the CPU time a process has used."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any


def free_port() -> int:
    """A port nothing listens on now (a benchmark starts its server on it right away)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 30, proc: subprocess.Popen[Any] | None = None) -> None:
    """Return once something accepts connections on ``port``; RuntimeError after ``timeout``,
    or as soon as ``proc`` (the server meant to listen there) exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process {proc.args!r} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"port {port} never opened")


def cpu_seconds(pid: int) -> float:
    """User + system CPU a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
