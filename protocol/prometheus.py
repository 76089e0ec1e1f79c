"""The Prometheus text exposition format and the tiny HTTP endpoint that serves it, shared by
the broker's metrics (:mod:`aiorocketmq.broker.metrics`) and the controller's
(:mod:`aiorocketmq.controller.metrics`).

:class:`PromText` writes one metric family at a time (``# HELP``/``# TYPE`` then samples);
:class:`MetricsEndpoint` answers ``GET /metrics`` with whatever its ``render`` callable returns,
one request a connection, nothing else served.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class PromText:
    """Prometheus text exposition format, one line at a time."""

    def __init__(self) -> None:
        self._lines: list[str] = []

    def header(self, name: str, kind: str, help_text: str) -> None:
        self._lines.append(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")

    def sample(self, name: str, labels: Mapping[str, object], value: float) -> None:
        inner = ",".join(f'{k}="{escape_label(str(v))}"' for k, v in labels.items())
        number = f"{value:.6g}" if isinstance(value, float) else str(value)
        self._lines.append(f"{name}{{{inner}}} {number}\n")

    def text(self) -> str:
        return "".join(self._lines)


async def answer_http(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, render: Callable[[], str]
) -> None:
    """One HTTP request on a fresh connection: ``GET /metrics`` gets ``render()``."""
    try:
        request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        method, _, rest = request.partition(b" ")
        path = rest.split(b" ", 1)[0].split(b"?", 1)[0]
        if method != b"GET":
            status, body, ctype = "405 Method Not Allowed", b"only GET\n", "text/plain"
        elif path == b"/metrics":
            status, body, ctype = "200 OK", render().encode(), CONTENT_TYPE
        else:
            status, body, ctype = "404 Not Found", b"metrics are at /metrics\n", "text/plain"
        writer.write(
            f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n".encode()
            + body
        )
        await writer.drain()
    except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        pass
    finally:
        writer.close()


class MetricsEndpoint:
    """``GET /metrics`` on ``host:port`` (port 0: any free one, :attr:`port` says which)."""

    def __init__(self, render: Callable[[], str], *, name: str = "metrics") -> None:
        self.render = render
        self.name = name
        self.port: int | None = None
        self._server: asyncio.Server | None = None

    async def start(self, host: str | None, port: int) -> int:
        self._server = await asyncio.start_server(self._serve, host, port, reuse_address=True)
        self.port = int(self._server.sockets[0].getsockname()[1])
        log.info("%s on http://%s:%d/metrics", self.name, host or "0.0.0.0", self.port)
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await answer_http(reader, writer, self.render)
