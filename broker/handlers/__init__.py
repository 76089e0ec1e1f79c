"""Request handlers, one module per request family; each family is a class built with only
the broker parts it uses, whose ``handlers()`` maps its request codes to its methods."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiorocketmq.protocol.errors import MessageIllegalError


def text_field(fields: Mapping[str, Any] | None, name: str) -> str:
    """A required text field of a request's header, or a refusal naming it (for the RocketMQ 5
    requests read without a header model)."""
    value = (fields or {}).get(name)
    if not isinstance(value, str) or not value:
        raise MessageIllegalError(f"the request has no {name}")
    return value


def int_field(fields: Mapping[str, Any] | None, name: str) -> int:
    """A required integer field of a request's header, or a refusal naming it."""
    value = (fields or {}).get(name)
    try:
        return int(str(value))
    except ValueError:
        raise MessageIllegalError(f"the request's {name} is not a number: {value!r}") from None
