"""OpenTelemetry for the SDK: trace context carried in message properties, send and process
spans, and send/consume metrics, through the OpenTelemetry API.

It is optional twice over. Without ``opentelemetry-api`` installed (the ``otel`` extra) the
import below fails once and every entry point answers "off". With the API installed but no
tracer or meter provider configured, the API's global providers are its proxies, and one
``isinstance`` per operation sees that and skips the work; once an application configures a
provider, it stays configured, so that answer is cached.

What crosses the wire: the producer writes the W3C ``traceparent`` of its send span into the
``TRACE_CONTEXT`` property, the name RocketMQ 5.x clients give it, and any other propagated
field (``tracestate``, ``baggage``) under its own name. Consumers read them back, and a process
span links to the producer's span. Messages from clients that carry no context (the C++
client, older Java clients) simply get process spans without links.

Attribute names follow OpenTelemetry's messaging semantic conventions (``messaging.system`` =
``rocketmq``, ``messaging.destination.name``, ``messaging.operation.type``, ...).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from aiorocketmq.protocol.message import Message, MessageExt, PropertyKey

if TYPE_CHECKING:
    from opentelemetry.trace import Span

try:
    from opentelemetry import context as otel_context
    from opentelemetry import metrics as otel_metrics
    from opentelemetry import propagate as otel_propagate
    from opentelemetry import trace as otel_trace
except ImportError:  # the otel extra is not installed: every entry point is off
    otel_trace = None  # type: ignore[assignment]

__all__ = [
    "TRACE_CONTEXT",
    "ProcessSpan",
    "active",
    "consumer_span",
    "extract_context",
    "record_send",
    "send_span",
]

#: The property that holds the W3C ``traceparent`` (RocketMQ 5.x's name for it).
TRACE_CONTEXT = "TRACE_CONTEXT"
_TRACEPARENT = "traceparent"
_SYSTEM = "rocketmq"
_SCOPE = "aiorocketmq"

_tracing_on = False
_metrics_on = False
_instruments: _Instruments | None = None


# The API's own getters consult os.environ on every call until a provider is set (a few µs),
# too much for a check made per send; its module globals say the same for the cost of an
# attribute read. Where a future API lacks them, the public getters answer instead.
_UNSET: Any = object()
if otel_trace is not None:
    import os

    from opentelemetry.metrics import _internal as _metrics_internal

    for _variable, _load in (
        ("OTEL_PYTHON_TRACER_PROVIDER", otel_trace.get_tracer_provider),
        ("OTEL_PYTHON_METER_PROVIDER", otel_metrics.get_meter_provider),
    ):
        if _variable in os.environ:  # a provider named by the environment loads on first use
            _load()


def _tracing() -> bool:
    global _tracing_on
    if _tracing_on:
        return True
    if otel_trace is None or getattr(otel_trace, "_TRACER_PROVIDER", _UNSET) is None:
        return False
    _tracing_on = not isinstance(otel_trace.get_tracer_provider(), otel_trace.ProxyTracerProvider)
    return _tracing_on


def _metering() -> bool:
    global _metrics_on
    if _metrics_on:
        return True
    if otel_trace is None or getattr(_metrics_internal, "_METER_PROVIDER", _UNSET) is None:
        return False
    # The API's default meter provider is a private proxy class; anything else is real.
    _metrics_on = type(otel_metrics.get_meter_provider()).__name__ != "_ProxyMeterProvider"
    return _metrics_on


def active() -> bool:
    """Whether any telemetry is wanted: the API is installed and a tracer or meter provider
    was configured. The SDK's hot paths ask this once per operation and do nothing more
    when it says no."""
    if _tracing_on or _metrics_on:
        return True
    # Asked per consumed batch: while neither API global holds a provider, answer from them
    # without the two calls.
    if otel_trace is None or (
        getattr(otel_trace, "_TRACER_PROVIDER", _UNSET) is None
        and getattr(_metrics_internal, "_METER_PROVIDER", _UNSET) is None
    ):
        return False
    return _tracing() or _metering()


class _Instruments:
    def __init__(self) -> None:
        meter = otel_metrics.get_meter(_SCOPE)
        self.sent = meter.create_counter(
            "messaging.client.sent.messages", unit="{message}", description="Messages the producer sent"
        )
        self.consumed = meter.create_counter(
            "messaging.client.consumed.messages",
            unit="{message}",
            description="Messages handed to the application",
        )
        self.send_duration = meter.create_histogram(
            "messaging.client.operation.duration", unit="s", description="Duration of send operations"
        )
        self.process_duration = meter.create_histogram(
            "messaging.process.duration", unit="s", description="Duration of processing by the application"
        )


def _meters() -> _Instruments | None:
    global _instruments
    if not _metering():
        return None
    if _instruments is None:
        _instruments = _Instruments()
    return _instruments


# -- carrying the context in properties ---------------------------------------------------


class _PropertySetter:
    """Writes propagated fields into message properties (``traceparent`` as TRACE_CONTEXT)."""

    def set(self, carrier: MutableMapping[str, str], key: str, value: str) -> None:
        carrier[TRACE_CONTEXT if key == _TRACEPARENT else key] = value


class _PropertyGetter:
    """Reads propagated fields from message properties; a plain ``traceparent`` property
    (written by other instrumentation) is read when TRACE_CONTEXT is absent."""

    def get(self, carrier: Mapping[str, str], key: str) -> list[str] | None:
        value = carrier.get(TRACE_CONTEXT) if key == _TRACEPARENT else None
        if value is None:
            value = carrier.get(key)
        return [value] if value is not None else None

    def keys(self, carrier: Mapping[str, str]) -> list[str]:
        return list(carrier)


# Duck-typed to the API's Getter/Setter, which do not exist when the API is not installed.
_SETTER: Any = _PropertySetter()
_GETTER: Any = _PropertyGetter()


def extract_context(msg: Message) -> Any:
    """The OpenTelemetry context a message carries (an empty one when it carries none)."""
    return otel_propagate.extract(msg.properties, getter=_GETTER)


def _message_attributes(msg: Message) -> dict[str, Any]:
    attrs: dict[str, Any] = {"messaging.message.body.size": len(msg.body)}
    tags = msg.properties.get(PropertyKey.TAGS)
    if tags:
        attrs["messaging.rocketmq.message.tag"] = tags
    keys = msg.keys
    if keys:
        attrs["messaging.rocketmq.message.keys"] = keys
    return attrs


# -- producer ------------------------------------------------------------------------------


@contextmanager
def send_span(
    messages: Sequence[Message], group: str, *, message_type: str = "normal"
) -> Iterator[Span | None]:
    """A PRODUCER span around one send (a single message or a batch); its context is written
    into every message's properties before the caller encodes them. Yields ``None`` when
    tracing is off. The caller sets ``messaging.message.id`` when the broker answered."""
    if not _tracing():
        yield None
        return
    topic = messages[0].topic
    attrs: dict[str, Any] = {
        "messaging.system": _SYSTEM,
        "messaging.destination.name": topic,
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
        "messaging.rocketmq.client_group": group,
        "messaging.rocketmq.message.type": message_type,
    }
    if len(messages) == 1:
        attrs.update(_message_attributes(messages[0]))
    else:
        attrs["messaging.batch.message_count"] = len(messages)
    tracer = otel_trace.get_tracer(_SCOPE)
    with tracer.start_as_current_span(
        f"send {topic}", kind=otel_trace.SpanKind.PRODUCER, attributes=attrs
    ) as span:
        for msg in messages:
            otel_propagate.inject(msg.properties, setter=_SETTER)
        yield span


def record_send(topic: str, count: int, seconds: float, error: BaseException | None = None) -> None:
    """Count a send of ``count`` messages and its duration (no-op when metrics are off)."""
    meters = _meters()
    if meters is None:
        return
    attrs: dict[str, Any] = {
        "messaging.system": _SYSTEM,
        "messaging.destination.name": topic,
        "messaging.operation.name": "send",
    }
    if error is not None:
        attrs["error.type"] = type(error).__qualname__
    meters.send_duration.record(seconds, attrs)
    meters.sent.add(count, attrs)


# -- consumers -----------------------------------------------------------------------------


class ProcessSpan:
    """A CONSUMER span around the application's handling of delivered messages, linked to
    each message's producer span and current while it is open (so the application's own
    spans are its children). Also counts the messages and the processing time."""

    __slots__ = ("_count", "_meters", "_span", "_start", "_token", "_topic", "failed")

    def __init__(self, messages: Sequence[MessageExt], group: str) -> None:
        self._topic = messages[0].topic
        self._count = len(messages)
        self._start = time.perf_counter()
        self._meters = _meters()
        self._span: Span | None = None
        self._token: Any = None
        self.failed = False
        if not _tracing():
            return
        links = []
        for msg in messages:
            parent = otel_trace.get_current_span(extract_context(msg)).get_span_context()
            if parent.is_valid:
                links.append(otel_trace.Link(parent))
        attrs: dict[str, Any] = {
            "messaging.system": _SYSTEM,
            "messaging.destination.name": self._topic,
            "messaging.operation.name": "process",
            "messaging.operation.type": "process",
            "messaging.consumer.group.name": group,
            "messaging.rocketmq.client_group": group,
        }
        if len(messages) == 1:
            msg = messages[0]
            attrs.update(_message_attributes(msg))
            attrs["messaging.message.id"] = msg.msg_id
            attrs["messaging.rocketmq.message.reconsume_times"] = msg.reconsume_times
        else:
            attrs["messaging.batch.message_count"] = len(messages)
        tracer = otel_trace.get_tracer(_SCOPE)
        self._span = tracer.start_span(
            f"process {self._topic}", kind=otel_trace.SpanKind.CONSUMER, attributes=attrs, links=links
        )
        self._token = otel_context.attach(otel_trace.set_span_in_context(self._span))

    def end(self, error: BaseException | None = None) -> None:
        """Close the span (once), marking it failed when ``error`` is given or ``failed`` was
        set, detach its context and record the metrics."""
        span = self._span
        failed = self.failed or error is not None
        if span is not None:
            self._span = None
            if error is not None:
                span.record_exception(error)
            if failed:
                span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR))
            span.end()
            otel_context.detach(self._token)
        meters = self._meters
        if meters is not None:
            self._meters = None
            attrs: dict[str, Any] = {
                "messaging.system": _SYSTEM,
                "messaging.destination.name": self._topic,
                "messaging.operation.name": "process",
            }
            if failed:
                attrs["error.type"] = type(error).__qualname__ if error is not None else "reconsume_later"
            meters.process_duration.record(time.perf_counter() - self._start, attrs)
            meters.consumed.add(self._count, attrs)


def consumer_span(messages: Sequence[MessageExt], group: str) -> ProcessSpan | None:
    """A :class:`ProcessSpan` for ``messages``, or ``None`` when telemetry is off."""
    if not active():
        return None
    return ProcessSpan(messages, group)
