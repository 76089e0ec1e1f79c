"""The exceptions an SDK user can catch.

Everything derives from :class:`aiorocketmq.protocol.errors.MQError`: broker answers map to
:class:`BrokerError` subclasses by response code, transport failures are
:class:`RemotingError` (timeouts, closed connections), and problems the SDK detects itself
are :class:`ClientError` — among them :class:`NoRouteError` and :class:`ClientStateError`
(a call the object's state does not allow, such as sending before ``start()``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from aiorocketmq.protocol.errors import (
    BrokerError,
    ClientError,
    ConnectionClosedError,
    MQError,
    NoRouteError,
    RemotingError,
    RequestTimeoutError,
    TopicNotExistError,
)

__all__ = [
    "BrokerError",
    "ClientError",
    "ClientStateError",
    "ConnectionClosedError",
    "MQError",
    "NoRouteError",
    "RemotingError",
    "RequestTimeoutError",
    "SendFailedError",
    "TopicNotExistError",
    "summarize_causes",
]


class ClientStateError(ClientError):
    """The call is not allowed in the object's current state (not started, shut down, ...)."""


class SendFailedError(ClientError):
    """Every attempt of a send failed; ``__cause__`` is the last attempt's error, ``errors``
    holds one error per attempt and ``brokers`` the broker each was aimed at (``None`` when
    no broker was reached for it, such as a budget running out).

    The message names each distinct cause once, with how often it happened: a send that
    rides out a broker restart may fail the same way a dozen times."""

    def __init__(
        self, message: str, errors: list[BaseException], brokers: Sequence[str | None] | None = None
    ) -> None:
        super().__init__(message)
        self.errors = errors
        self.brokers: list[str | None] = list(brokers) if brokers is not None else [None] * len(errors)


#: A duration in an error text ("within 1.5s", "in 0.25 s"): attempts that differ only in the
#: time they had left fail for the same reason.
_DURATION = re.compile(r"\d+(?:\.\d+)?(?= ?m?s\b)")


def summarize_causes(causes: Iterable[tuple[str | None, BaseException]]) -> str:
    """``"broker-a: <error> (x3); broker-b: <error>"``: each distinct cause once, in the order
    first seen, counted. Causes are the same when they happened at the same place, are of the
    same class and their texts differ at most in durations, which are then shown as a range."""
    groups: dict[tuple[str | None, type[BaseException], str], list[str]] = {}
    for where, error in causes:
        text = str(error) or type(error).__name__
        key = (where, type(error), _DURATION.sub("\0", text))
        groups.setdefault(key, []).append(text)
    parts = []
    for (where, _, template), texts in groups.items():
        text = texts[0]
        if len(set(texts)) > 1:
            columns = zip(*(_DURATION.findall(t) for t in texts), strict=True)
            pieces = template.split("\0")
            text = pieces[0] + "".join(
                _span(column) + piece for column, piece in zip(columns, pieces[1:], strict=True)
            )
        if where is not None and not text.startswith(where):
            text = f"{where}: {text}"
        parts.append(f"{text} (x{len(texts)})" if len(texts) > 1 else text)
    return "; ".join(parts)


def _span(values: tuple[str, ...]) -> str:
    low = min(values, key=float)
    high = max(values, key=float)
    return low if float(low) == float(high) else f"{low}-{high}"
