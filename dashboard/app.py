"""The web application: Starlette routes rendering Jinja2 templates on the server (cluster and
broker settings, topics, consumer groups and their clients, producers, messages, message traces,
dead letters, ACL accounts, the TPS history by day, the consumer-group monitors, and with
``--controller`` the controllers of a controller-mode cluster), one JSON
endpoint for the live charts, the optional login, and the rule that no cluster failure ever
breaks a page: every handler turns an error into a message shown on the page it renders.

Forms post and redirect (the outcome travels in a short ``flash`` cookie), so reloading a page
repeats no action. Every asset comes from the package's ``static/`` folder. docs/dashboard.md
maps these pages to Apache rocketmq-dashboard's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path
from typing import Any

import jinja2
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from aiorocketmq.client import ClientOptions
from aiorocketmq.protocol.auth import USER_SUBJECT_PREFIX, UserInfo, user_subject
from aiorocketmq.protocol.codes import PERM_READ_WRITE, MQVersion, Perm
from aiorocketmq.protocol.errors import MQError

from . import controllers as controller_view
from . import render
from .cluster_access import (
    GROUP_SETTINGS,
    MAX_SCAN,
    AclAccount,
    AuthEntry,
    AuthUser,
    ClusterAccess,
    MessageRow,
    TracedMessage,
    describe,
)
from .history import Collector, HistoryStore
from .live import LiveSampler
from .monitor import GroupMonitor, Thresholds
from .trace import TRACE_TOPIC
from .users import LoginThrottle, Sessions, User

log = logging.getLogger(__name__)

SESSION_COOKIE = "mqdashboard_session"
FLASH_COOKIE = "mqdashboard_flash"
#: Failures a page reports instead of failing: the cluster's and bad input.
EXPECTED = (MQError, OSError, ValueError, TimeoutError)

Handler = Callable[[Request], Awaitable[Response]]


#: ``--data-dir``'s default.
DEFAULT_DATA_DIR = Path.home() / ".aiorocketmq" / "dashboard"


@dataclass
class Settings:
    namesrv: str
    refresh: float = 5.0
    request_timeout: float = 3.0
    sessions: Sessions | None = None
    access_key: str | None = None
    secret_key: str | None = None
    security_token: str | None = None
    #: TLS to every server (``tls_ca_file``: the CAs to check them against).
    tls: bool = False
    tls_ca_file: str | None = None
    tls_verify: bool = True
    #: Where the TPS history (a file a day) and the group monitors' settings are kept.
    data_dir: Path = DEFAULT_DATA_DIR
    #: Seconds between collector rounds (history sample and monitor check); 0: no collector.
    collect_interval: float = 60.0
    #: Days of history kept (today's included).
    history_days: int = 7
    #: The controllers of a controller-mode cluster (``host:port;host:port``): the
    #: ``/controller`` page, with each group's master and SyncStateSet.
    controllers: str | None = None


def perm_text(perm: int) -> str:
    return ("R" if perm & Perm.READ else "-") + ("W" if perm & Perm.WRITE else "-")


def version_text(version: int) -> str:
    """A client's version as RocketMQ names it (``V4_9_4``), or the number."""
    try:
        return MQVersion(version).name
    except ValueError:
        return str(version)


def _templates() -> Jinja2Templates:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("aiorocketmq.dashboard", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["when"] = render.when
    env.filters["perm"] = perm_text
    env.filters["version"] = version_text
    env.filters["q"] = lambda value: urllib.parse.quote(str(value), safe="")
    env.filters["ratio"] = lambda value: "" if value is None else f"{value * 100:.1f}%"
    env.filters["tps"] = lambda value: "" if value is None else f"{value:.1f}"
    return Jinja2Templates(env=env)


TEMPLATES = _templates()


# -- request helpers --------------------------------------------------------------------------


async def form_lists(request: Request) -> dict[str, list[str]]:
    """An urlencoded form's fields, every value of each."""
    body = (await request.body()).decode("utf-8", errors="replace")
    return urllib.parse.parse_qs(body, keep_blank_values=True)


async def form(request: Request) -> dict[str, str]:
    """An urlencoded form's fields (the last value of a repeated one)."""
    return {k: v[-1] for k, v in (await form_lists(request)).items()}


def ops(request: Request) -> ClusterAccess:
    ops_: ClusterAccess = request.app.state.ops
    return ops_


def user_of(request: Request) -> User | None:
    user: User | None = getattr(request.state, "user", None)
    return user


def page(request: Request, template: str, status: int = 200, **context: Any) -> Response:
    flash = request.cookies.get(FLASH_COOKIE)
    kind, _, text = urllib.parse.unquote(flash or "").partition("|")
    settings: Settings = request.app.state.settings
    response = TEMPLATES.TemplateResponse(
        request,
        template,
        {
            "namesrv": settings.namesrv,
            "controllers": settings.controllers,
            "refresh": settings.refresh,
            "user": user_of(request),
            "login_enabled": settings.sessions is not None,
            "flash_ok": text if kind == "ok" else None,
            "flash_error": text if kind == "error" else None,
            "error": None,
            **context,
        },
        status_code=status,
    )
    if flash:
        response.delete_cookie(FLASH_COOKIE)
    return response


def redirect(url: str, ok: str | None = None, error: str | None = None) -> RedirectResponse:
    response = RedirectResponse(url, status_code=303)
    if ok or error:
        value = f"ok|{ok}" if ok else f"error|{error}"
        response.set_cookie(
            FLASH_COOKIE, urllib.parse.quote(value), max_age=60, httponly=True, samesite="strict"
        )
    return response


async def attempt(call: Awaitable[Any]) -> tuple[Any, str | None]:
    """Await ``call``; a cluster failure or bad input comes back as the message to show."""
    try:
        return await call, None
    except EXPECTED as exc:
        return None, describe(exc)


def parse_time(text: str, default: float) -> float:
    """A ``datetime-local`` field's value (local time) as seconds since the epoch."""
    text = text.strip()
    if not text:
        return default
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        raise ValueError(f"not a date and time: {text!r}") from None


def local_input(seconds: float) -> str:
    return datetime.fromtimestamp(seconds).strftime("%Y-%m-%dT%H:%M:%S")


def int_field(fields: dict[str, str], name: str, default: int, low: int = 1, high: int = 1024) -> int:
    text = fields.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, not {text!r}") from None
    if not low <= value <= high:
        raise ValueError(f"{name} must be between {low} and {high}")
    return value


@dataclass
class Pager:
    """One page of a list: its rows and the links to the others (``base`` is the query
    string of the list without its page number)."""

    rows: list[Any]
    page: int
    size: int
    total: int
    base: str

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.total / self.size))

    def near(self) -> list[int]:
        """The page numbers the pager links: first, last and two either side of this one."""
        shown = {1, self.pages, *range(self.page - 2, self.page + 3)}
        return sorted(n for n in shown if 1 <= n <= self.pages)


PAGE_SIZES = (20, 50, 100)
#: RocketMQ 5's message types a topic may declare, and the types the topic list filters by.
MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED")
TOPIC_TYPES = (*MESSAGE_TYPES, "UNSPECIFIED", "RETRY", "DLQ", "SYSTEM")


def paged(rows: list[Any], query: dict[str, str], page_text: str, size_text: str) -> Pager:
    try:
        size = int(size_text)
    except ValueError:
        size = PAGE_SIZES[0]
    size = size if size in PAGE_SIZES else PAGE_SIZES[0]
    pages = max(1, math.ceil(len(rows) / size))
    try:
        page = min(max(1, int(page_text)), pages)
    except ValueError:
        page = 1
    base = urllib.parse.urlencode({**query, "size": str(size)})
    return Pager(rows[(page - 1) * size : page * size], page, size, len(rows), base)


# -- cluster ------------------------------------------------------------------------------------


async def cluster_page(request: Request) -> Response:
    brokers, error = await attempt(ops(request).brokers())
    settings: Settings = request.app.state.settings
    return page(
        request,
        "cluster.html",
        brokers=brokers or [],
        error=error,
        has_slaves=any(b.broker_id != 0 for b in brokers or []),
        access_key=settings.access_key,
    )


async def broker_page(request: Request) -> Response:
    addr = request.query_params.get("addr", "").strip()
    text = request.query_params.get("q", "").strip()
    brokers, error = await attempt(ops(request).brokers())
    row = next((b for b in brokers or [] if b.addr == addr), None)
    config, config_error = await attempt(ops(request).broker_config(addr))
    items = [(k, v) for k, v in (config or {}).items() if text.lower() in k.lower()]
    return page(
        request,
        "broker.html",
        addr=addr,
        broker=row,
        q=text,
        items=items,
        keys=sorted(config or {}),
        edit=request.query_params.get("edit", ""),
        current=(config or {}).get(request.query_params.get("edit", ""), ""),
        error=config_error or error,
    )


async def broker_config_update(request: Request) -> Response:
    fields = await form(request)
    addr, key, value = fields.get("addr", ""), fields.get("key", "").strip(), fields.get("value", "").strip()
    back = f"/broker?addr={urllib.parse.quote(addr)}&q={urllib.parse.quote(key)}"
    try:
        if not key:
            raise ValueError("name the setting to change")
        before = (await ops(request).broker_config(addr)).get(key)
        after = await ops(request).update_broker_config(addr, key, value)
    except EXPECTED as exc:
        return redirect(back, error=f"{key} not changed: {describe(exc)}")
    if after is None:
        return redirect(back, error=f"{key} not changed: the broker at {addr} has no such setting")
    if after != value and after == before:
        return redirect(
            back, error=f"{key} not changed: the broker kept {after} (it does not change it while running)"
        )
    return redirect(back, ok=f"{key} set to {after} on {addr} (in memory: a restart reads broker.conf again)")


# -- controllers (controller mode) ---------------------------------------------------------------


def controller_addrs(request: Request) -> list[str]:
    settings: Settings = request.app.state.settings
    return controller_view.split_addresses(settings.controllers)


async def controller_page(request: Request) -> Response:
    configured = controller_addrs(request)
    wanted = [n for n in request.query_params.get("broker", "").replace(",", " ").split() if n]
    view = None
    error = None
    if configured:
        view, error = await attempt(controller_view.overview(ops(request), configured, wanted))
    return page(
        request,
        "controller.html",
        configured=configured,
        view=view,
        wanted=" ".join(wanted),
        open_end=controller_view.OPEN_END,
        error=error or (view.error if view is not None else None),
    )


async def controller_elect(request: Request) -> Response:
    fields = await form(request)
    broker_name = fields.get("broker_name", "").strip()
    cluster = fields.get("cluster", "").strip()
    # Back to the page as it was, this group shown even when the name servers do not know it.
    shown = dict.fromkeys([*fields.get("wanted", "").split(), *([broker_name] if broker_name else [])])
    back = "/controller" + ("?" + urllib.parse.urlencode({"broker": " ".join(shown)}) if shown else "")
    try:
        if not broker_name:
            raise ValueError("name the broker group")
        broker_id = int_field(fields, "broker_id", 0, low=0, high=2**31 - 1)
        if broker_id < 1:
            raise ValueError("choose the broker to elect")
        header = await controller_view.elect(
            ops(request), controller_addrs(request), cluster, broker_name, broker_id
        )
    except EXPECTED as exc:
        return redirect(back, error=f"{broker_name}: no master elected: {describe(exc)}")
    return redirect(
        back,
        ok=f"{broker_name}: broker {header.master_broker_id} at {header.master_address} is master, "
        f"master epoch {header.master_epoch}",
    )


# -- topics -------------------------------------------------------------------------------------


async def topics_page(request: Request) -> Response:
    text = request.query_params.get("q", "")
    show_system = request.query_params.get("system") == "1"
    wanted = request.query_params.get("type", "")
    topics, error = await attempt(ops(request).topics(text))
    rows = [
        t
        for t in topics or []
        if (show_system or t.kind == "normal" or wanted in ("RETRY", "DLQ", "SYSTEM"))
        and (not wanted or t.type == wanted)
    ]
    return page(
        request,
        "topics.html",
        topics=rows,
        q=text,
        show_system=show_system,
        wanted=wanted,
        types=TOPIC_TYPES,
        message_types=MESSAGE_TYPES,
        error=error,
    )


async def topic_create(request: Request) -> Response:
    fields = await form(request)
    topic = fields.get("topic", "").strip()
    try:
        read = int_field(fields, "read_queues", 8)
        write = int_field(fields, "write_queues", 8)
        perm = int_field(fields, "perm", PERM_READ_WRITE, low=0, high=7)
        if not topic:
            raise ValueError("give the topic a name")
        message_type = fields.get("message_type", "").strip()
        if message_type and message_type not in MESSAGE_TYPES:
            raise ValueError(f"message type must be one of {', '.join(MESSAGE_TYPES)}")
        await ops(request).create_topic(
            topic, read, write, perm, fields.get("broker_addr", "").strip(), message_type or None
        )
    except EXPECTED as exc:
        return redirect("/topics", error=f"topic {topic!r} was not saved: {describe(exc)}")
    return redirect(
        f"/topic?name={urllib.parse.quote(topic)}",
        ok=f"topic {topic} saved: {read} read / {write} write queues, perm {perm_text(perm)}",
    )


async def topic_update(request: Request) -> Response:
    fields = await form(request)
    topic = fields.get("topic", "").strip()
    back = f"/topic?name={urllib.parse.quote(topic)}"
    try:
        read = int_field(fields, "read_queues", 8)
        write = int_field(fields, "write_queues", 8)
        perm = int_field(fields, "perm", PERM_READ_WRITE, low=0, high=7)
        message_type = fields.get("message_type", "").strip()
        if message_type and message_type not in MESSAGE_TYPES:
            raise ValueError(f"message type must be one of {', '.join(MESSAGE_TYPES)}")
        written = await ops(request).update_topic(
            topic, read, write, perm, fields.get("broker_addr", "").strip() or None, message_type or None
        )
    except EXPECTED as exc:
        return redirect(back, error=f"topic {topic!r} was not updated: {describe(exc)}")
    return redirect(
        back,
        ok=f"topic {topic} saved: {read} read / {write} write queues, perm {perm_text(perm)}"
        f" on {', '.join(written)}",
    )


async def topic_page(request: Request) -> Response:
    topic = request.query_params.get("name", "")
    detail, error = await attempt(ops(request).topic_detail(topic))
    # The update form starts from what the route says now, so saving it unchanged changes nothing.
    queues = sorted(detail.route.queue_datas, key=lambda q: q.broker_name) if detail else []
    masters = (
        {d.broker_name: d.broker_addrs[0] for d in detail.route.broker_datas if 0 in d.broker_addrs}
        if detail
        else {}
    )
    current = queues[0] if queues else None
    config = (
        await ops(request).topic_config(topic, masters[current.broker_name])
        if current and current.broker_name in masters
        else None
    )
    uniform = all(
        (q.read_queue_nums, q.write_queue_nums, q.perm)
        == (queues[0].read_queue_nums, queues[0].write_queue_nums, queues[0].perm)
        for q in queues
    )
    return page(
        request,
        "topic.html",
        topic=topic,
        detail=detail,
        current=current,
        uniform=uniform,
        masters=sorted(masters.items()),
        message_type=(config.attributes.get("message.type", "") if config else ""),
        message_types=MESSAGE_TYPES,
        now=local_input(time.time()),
        error=error,
    )


async def topic_reset(request: Request) -> Response:
    """Reset (or skip to the end) the chosen groups' offsets on one topic."""
    fields = await form_lists(request)
    topic = (fields.get("topic") or [""])[-1]
    groups = fields.get("groups") or []
    skip = (fields.get("action") or [""])[-1] == "skip"
    back = f"/topic?name={urllib.parse.quote(topic)}"
    try:
        if not groups:
            raise ValueError("choose at least one group")
        timestamp = -1.0 if skip else parse_time((fields.get("time") or [""])[-1], time.time())
        moved = [await ops(request).reset_offset(group, topic, timestamp) for group in groups]
    except EXPECTED as exc:
        return redirect(back, error=f"offsets on {topic} not reset: {describe(exc)}")
    target = "its end" if skip else render.when(int(timestamp * 1000))
    queues = sum(len(m) for m in moved)
    return redirect(back, ok=f"offsets of {', '.join(groups)} on {topic} moved to {target}: {queues} queues")


async def topic_delete(request: Request) -> Response:
    topic = (await form(request)).get("topic", "")
    _, error = await attempt(ops(request).delete_topic(topic))
    if error:
        return redirect(
            f"/topic?name={urllib.parse.quote(topic)}", error=f"topic {topic} not deleted: {error}"
        )
    return redirect("/topics", ok=f"topic {topic} deleted")


async def topic_send(request: Request) -> Response:
    fields = await form(request)
    topic = fields.get("topic", "")
    keys = fields.get("keys", "").split()
    result, error = await attempt(
        ops(request).send(topic, fields.get("body", "").encode(), fields.get("tags", "").strip(), keys)
    )
    back = f"/topic?name={urllib.parse.quote(topic)}"
    if error:
        return redirect(back, error=f"message not sent: {error}")
    return redirect(
        back,
        ok=f"sent {result.status.value}: msgId {result.msg_id} to {result.queue.broker_name} "
        f"queue {result.queue.queue_id} offset {result.queue_offset}",
    )


# -- consumer groups ----------------------------------------------------------------------------


def monitor_of(request: Request) -> GroupMonitor:
    monitor: GroupMonitor = request.app.state.monitor
    return monitor


async def groups_page(request: Request) -> Response:
    text = request.query_params.get("q", "")
    groups, error = await attempt(ops(request).groups(text))
    monitor = monitor_of(request)
    return page(
        request,
        "groups.html",
        groups=groups or [],
        q=text,
        alarms=monitor.alarms,
        monitored=set(monitor.thresholds),
        error=error,
    )


async def group_page(request: Request) -> Response:
    group = request.query_params.get("name", "")
    detail, error = await attempt(ops(request).group_detail(group))
    settings, settings_error = await attempt(ops(request).group_settings(group))
    masters, _ = await attempt(ops(request).masters())
    held = dict(settings or {})
    shown = next(iter(held.values()), None)
    return page(
        request,
        "group.html",
        group=group,
        detail=detail,
        error=error,
        now=local_input(time.time()),
        settings=held,
        shown={
            k: v for k, v in (shown.model_dump(by_alias=True) if shown else {}).items() if k in GROUP_SETTINGS
        },
        settings_error=settings_error,
        masters=sorted((masters or {}).items()),
        limits=monitor_of(request).limits(group),
        alarm=monitor_of(request).alarms.get(group, {}),
        monitor_on=request.app.state.settings.collect_interval > 0,
    )


def _optional_int(fields: dict[str, str], name: str, high: int) -> int | None:
    return int_field(fields, name, -1, low=0, high=high) if fields.get(name, "").strip() else None


async def group_monitor_update(request: Request) -> Response:
    """Save a group's monitor thresholds (blank: not checked) and check them at once."""
    fields = await form(request)
    group = fields.get("group", "").strip()
    back = f"/group?name={urllib.parse.quote(group)}"
    monitor = monitor_of(request)
    try:
        if not group:
            raise ValueError("name the group to monitor")
        limits = Thresholds(
            _optional_int(fields, "min_consumers", 10_000), _optional_int(fields, "max_lag", 2**62)
        )
        monitor.set(group, limits)
    except EXPECTED as exc:
        return redirect(back, error=f"monitor of {group} not saved: {describe(exc)}")
    if limits.empty:
        return redirect(back, ok=f"{group} is no longer monitored")
    await monitor.check_group(group)
    return redirect(back, ok=f"monitor of {group} saved")


async def client_page(request: Request) -> Response:
    group = request.query_params.get("group", "")
    client_id = request.query_params.get("client", "")
    info, error = await attempt(ops(request).running_info(group, client_id))
    return page(request, "client.html", group=group, client_id=client_id, info=info, error=error)


async def group_reset(request: Request) -> Response:
    fields = await form(request)
    group = fields.get("group", "")
    topic = fields.get("topic", "")
    back = f"/group?name={urllib.parse.quote(group)}"
    try:
        timestamp = parse_time(fields.get("time", ""), time.time())
        moved = await ops(request).reset_offset(group, topic, timestamp)
    except EXPECTED as exc:
        return redirect(back, error=f"offsets of {group} not reset: {describe(exc)}")
    return redirect(
        back,
        ok=f"offsets of {group} on {topic} reset to {render.when(int(timestamp * 1000))}: {len(moved)} queues",
    )


async def group_skip(request: Request) -> Response:
    group = (await form(request)).get("group", "")
    back = f"/group?name={urllib.parse.quote(group)}"
    moved, error = await attempt(ops(request).skip_accumulated(group))
    if error:
        return redirect(back, error=f"backlog of {group} not skipped: {error}")
    return redirect(back, ok=f"{group} skipped its backlog: {len(moved)} queues moved to their end")


async def group_delete(request: Request) -> Response:
    fields = await form(request)
    group = fields.get("group", "")
    broker_addr = fields.get("broker_addr", "").strip()
    _, error = await attempt(
        ops(request).delete_group(
            group, remove_offsets=fields.get("offsets") == "1", broker_addr=broker_addr or None
        )
    )
    if error:
        return redirect(
            f"/group?name={urllib.parse.quote(group)}", error=f"group {group} not deleted: {error}"
        )
    if broker_addr:
        return redirect(
            f"/group?name={urllib.parse.quote(group)}", ok=f"group {group} deleted on {broker_addr}"
        )
    return redirect("/groups", ok=f"group {group} deleted")


# -- producers ----------------------------------------------------------------------------------


async def producers_page(request: Request) -> Response:
    group = request.query_params.get("group", "").strip()
    topic = request.query_params.get("topic", "").strip()
    connections = None
    error = None
    topics, topics_error = await attempt(ops(request).topics(with_routes=False))
    known, _ = await attempt(ops(request).producer_groups())
    if group:
        connections, error = await attempt(ops(request).producer_connections(group, topic or None))
    return page(
        request,
        "producers.html",
        group=group,
        topic=topic,
        topics=[t.topic for t in topics or [] if t.kind == "normal"],
        connections=connections,
        known=known or {},
        error=error or topics_error,
    )


# -- messages -----------------------------------------------------------------------------------


async def messages_page(request: Request) -> Response:
    q = request.query_params
    topic = q.get("topic", "").strip()
    key = q.get("key", "").strip()
    msg_id = q.get("id", "").strip()
    now = time.time()
    begin_text = q.get("begin", "") or local_input(now - 3600)
    end_text = q.get("end", "") or local_input(now + 60)
    mode = q.get("by", "time")
    rows: list[MessageRow] | None = None
    query: dict[str, str] = {}
    in_range = 0
    error = None
    if mode == "id" and msg_id:
        return redirect(f"/message?topic={urllib.parse.quote(topic)}&id={urllib.parse.quote(msg_id)}")
    if topic and mode == "key" and key:
        rows, error = await attempt(ops(request).messages_by_key(topic, key))
        query = {"by": "key", "topic": topic, "key": key}
    elif topic and mode == "time":
        try:
            begin = parse_time(begin_text, now - 3600)
            end = parse_time(end_text, now)
            # A page link repeats the search's exact range: its pages come from one reading.
            search = await ops(request).messages_by_time(topic, begin, end, fresh="page" not in q)
            rows, in_range = search.rows, search.in_range
            query = {"by": "time", "topic": topic, "begin": begin_text, "end": end_text}
        except EXPECTED as exc:
            error = describe(exc)
    pager = paged(rows, query, q.get("page", "1"), q.get("size", "")) if rows is not None else None
    return page(
        request,
        "messages.html",
        topic=topic,
        key=key,
        msg_id=msg_id,
        by=mode,
        begin=begin_text,
        end=end_text,
        pager=pager,
        in_range=in_range,
        max_scan=MAX_SCAN,
        sizes=PAGE_SIZES,
        error=error,
    )


async def message_page(request: Request) -> Response:
    q = request.query_params
    topic = q.get("topic", "").strip()
    msg_id = q.get("id", "").strip()
    view = q.get("as", "text") if q.get("as") in render.BODY_VIEWS else "text"
    msg, error = await attempt(ops(request).message(topic or None, msg_id))
    context: dict[str, Any] = {"topic": topic, "msg_id": msg_id, "view": view, "msg": msg, "error": error}
    if msg is not None:
        body, body_note = render.body_as(msg.body, view)
        groups, _ = await attempt(ops(request).group_names())
        context.update(
            headers=render.headers(msg),
            properties=sorted(msg.properties.items()),
            body=body,
            body_note=body_note,
            trace=await ops(request).trace(msg),
            groups=groups or [],
        )
    return page(request, "message.html", **context)


async def message_resend(request: Request) -> Response:
    fields = await form(request)
    topic, msg_id, group = fields.get("topic", ""), fields.get("id", ""), fields.get("group", "").strip()
    back = f"/message?topic={urllib.parse.quote(topic)}&id={urllib.parse.quote(msg_id)}"
    try:
        if not group:
            raise ValueError("choose the consumer group to resend to")
        msg = await ops(request).message(topic or None, msg_id)
        result = await ops(request).resend(msg, group)
    except EXPECTED as exc:
        return redirect(back, error=f"not resent: {describe(exc)}")
    return redirect(back, ok=f"resent to {group} as {result.msg_id}")


# -- message trace ------------------------------------------------------------------------------


@dataclass
class Consumption:
    """One listener call of a consumer group on the traced message (``SubBefore`` and its
    ``SubAfter``; no ``SubAfter`` yet: still running, or the client stopped)."""

    group: str
    client_host: str
    began: int
    retry_times: int | None
    cost_ms: int | None
    success: bool | None


def consumptions(traced: list[TracedMessage]) -> dict[str, list[Consumption]]:
    """The traced message's listener calls by consumer group."""
    after = {t.record.request_id: t.record for t in traced if t.record.kind == "SubAfter"}
    calls: dict[str, list[Consumption]] = {}
    for t in traced:
        r = t.record
        if r.kind != "SubBefore":
            continue
        done = after.get(r.request_id)
        calls.setdefault(r.group, []).append(
            Consumption(
                r.group,
                t.client_host,
                r.timestamp,
                r.retry_times,
                done.cost_ms if done else None,
                done.success if done else None,
            )
        )
    # A SubAfter whose SubBefore is missing still tells that the group consumed it.
    befores = {t.record.request_id for t in traced if t.record.kind == "SubBefore"}
    for t in traced:
        r = t.record
        if r.kind == "SubAfter" and r.request_id not in befores:
            calls.setdefault(r.group or "?", []).append(
                Consumption(r.group, t.client_host, r.timestamp, None, r.cost_ms, r.success)
            )
    return dict(sorted(calls.items()))


async def trace_page(request: Request) -> Response:
    q = request.query_params
    msg_id = q.get("id", "").strip()
    topic = q.get("topic", "").strip()
    key = q.get("key", "").strip()
    trace_topic = q.get("trace_topic", "").strip() or TRACE_TOPIC
    found: list[MessageRow] | None = None
    traced: list[TracedMessage] | None = None
    error = None
    if msg_id:
        traced, error = await attempt(ops(request).trace_of(msg_id, trace_topic))
    elif topic and key:
        found, error = await attempt(ops(request).messages_by_key(topic, key))
    return page(
        request,
        "trace.html",
        msg_id=msg_id,
        topic=topic,
        key=key,
        trace_topic=trace_topic,
        found=found,
        sent=[t for t in traced or [] if t.record.kind in ("Pub", "EndTransaction")],
        consumed=consumptions(traced or []),
        traced=traced,
        error=error,
    )


# -- consumer group settings ------------------------------------------------------------------------

_BOOL_SETTINGS = ("consumeEnable", "consumeBroadcastEnable", "consumeFromMinEnable")


async def group_settings_update(request: Request) -> Response:
    fields = await form(request)
    group = fields.get("group", "").strip()
    back = f"/group?name={urllib.parse.quote(group)}"
    try:
        if not group:
            raise ValueError("give the group a name")
        settings: dict[str, Any] = {name: fields.get(name) == "1" for name in _BOOL_SETTINGS}
        settings["retryQueueNums"] = int_field(fields, "retryQueueNums", 1, low=0, high=64)
        settings["retryMaxTimes"] = int_field(fields, "retryMaxTimes", 16, low=-1, high=1000)
        settings["brokerId"] = int_field(fields, "brokerId", 0, low=0, high=64)
        settings["whichBrokerWhenConsumeSlowly"] = int_field(
            fields, "whichBrokerWhenConsumeSlowly", 1, low=0, high=64
        )
        await ops(request).update_group_settings(group, settings)
    except EXPECTED as exc:
        return redirect(back, error=f"settings of {group} not saved: {describe(exc)}")
    return redirect(back, ok=f"settings of {group} saved on every master")


# -- ACL ------------------------------------------------------------------------------------------

ACL_PERMS = ("DENY", "PUB", "SUB", "PUB|SUB")


def may_see_secrets(request: Request) -> bool:
    """Secret keys are shown to admins, or to everyone when the dashboard has no login."""
    settings: Settings = request.app.state.settings
    user = user_of(request)
    return settings.sessions is None or (user is not None and user.admin)


async def acl_page(request: Request) -> Response:
    view, error = await attempt(ops(request).acl())
    edit_key = request.query_params.get("edit", "")
    editing = next((a for a in view.accounts if a.access_key == edit_key), None) if view else None
    return page(
        request,
        "acl.html",
        view=view,
        editing=editing or AclAccount(""),
        show_secrets=may_see_secrets(request),
        perms=ACL_PERMS,
        error=error,
    )


def _perm_lines(text: str) -> list[str]:
    """``Name=PERM`` entries, one a line or comma-separated, each checked."""
    entries = [e.strip() for e in text.replace(",", "\n").splitlines() if e.strip()]
    for entry in entries:
        name, sep, perm = entry.partition("=")
        if not sep or not name.strip() or perm.strip() not in ACL_PERMS:
            raise ValueError(f"{entry!r} is not Name=PERM with PERM one of {', '.join(ACL_PERMS)}")
    return [e.replace(" ", "") for e in entries]


def _outcome(what: str, errors: dict[str, str | None], back: str = "/acl") -> RedirectResponse:
    failed = {name: error for name, error in errors.items() if error}
    done = [name for name, error in errors.items() if not error]
    if failed:
        return redirect(
            back,
            error=f"{what} on {', '.join(done)}; not on "
            + "; ".join(f"{name} ({error})" for name, error in failed.items()),
        )
    return redirect(back, ok=f"{what} on {', '.join(done)}")


async def acl_account_update(request: Request) -> Response:
    fields = await form(request)
    access_key = fields.get("access_key", "").strip()
    try:
        if not access_key:
            raise ValueError("give the account an access key")
        for name in ("default_topic_perm", "default_group_perm"):
            if fields.get(name, "") not in ("", *ACL_PERMS):
                raise ValueError(f"{name} must be one of {', '.join(ACL_PERMS)}")
        account = AclAccount(
            access_key,
            secret_key=fields.get("secret_key", "").strip(),
            white_remote_address=fields.get("white_remote_address", "").strip(),
            admin=fields.get("admin") == "1",
            default_topic_perm=fields.get("default_topic_perm", ""),
            default_group_perm=fields.get("default_group_perm", ""),
            topic_perms=_perm_lines(fields.get("topic_perms", "")),
            group_perms=_perm_lines(fields.get("group_perms", "")),
        )
        errors = await ops(request).update_acl_account(account)
    except EXPECTED as exc:
        return redirect("/acl", error=f"account {access_key} not saved: {describe(exc)}")
    return _outcome(f"account {access_key} saved", errors)


async def acl_account_delete(request: Request) -> Response:
    access_key = (await form(request)).get("access_key", "").strip()
    errors, error = await attempt(ops(request).delete_acl_account(access_key))
    if error:
        return redirect("/acl", error=f"account {access_key} not deleted: {error}")
    return _outcome(f"account {access_key} deleted", errors)


async def acl_white_update(request: Request) -> Response:
    text = (await form(request)).get("addresses", "")
    patterns = [p.strip() for p in text.replace(",", "\n").splitlines() if p.strip()]
    errors, error = await attempt(ops(request).update_global_white(patterns))
    if error:
        return redirect("/acl", error=f"global white list not saved: {error}")
    return _outcome("global white list saved", errors)


# -- ACL 2.0 --------------------------------------------------------------------------------------

#: Apache 5.3.3's wire values (protocol/auth.py).
USER_TYPES = ("Normal", "Super")
USER_STATUSES = ("enable", "disable")
ACTIONS = ("All", "Pub", "Sub", "Create", "Update", "Delete", "Get", "List")
DECISIONS = ("Allow", "Deny")
RESOURCE_TYPES = ("Cluster", "Topic", "Group")


def _items(text: str) -> list[str]:
    """Comma- or line-separated values."""
    return [item.strip() for item in text.replace(",", "\n").splitlines() if item.strip()]


def _resources(text: str) -> list[str]:
    resources = _items(text)
    if not resources:
        raise ValueError("give at least one resource: Topic:Orders, Group:billing, Cluster:DefaultCluster")
    for resource in resources:
        kind, sep, name = resource.partition(":")
        if resource != "*" and (not sep or kind not in RESOURCE_TYPES or not name):
            raise ValueError(
                f"{resource!r} is not Type:name with Type one of {', '.join(RESOURCE_TYPES)} (or *)"
            )
    return resources


def _subject(text: str) -> str:
    subject = text.strip()
    if not subject.startswith(USER_SUBJECT_PREFIX):
        subject = user_subject(subject)
    if subject == USER_SUBJECT_PREFIX:
        raise ValueError("give the policy a subject: a user name")
    return subject


async def acl2_page(request: Request) -> Response:
    view, error = await attempt(ops(request).auth())
    query = request.query_params
    editing_user = AuthUser(query.get("user", ""))
    editing_entry = AuthEntry(query.get("subject", ""), "Custom", query.get("resource", ""))
    if view:
        editing_user = next((u for u in view.users if u.username == editing_user.username), editing_user)
        editing_entry = next(
            (
                e
                for e in view.entries
                if (e.subject, e.resource) == (editing_entry.subject, editing_entry.resource)
            ),
            editing_entry,
        )
    return page(
        request,
        "acl2.html",
        view=view,
        editing_user=editing_user,
        editing_entry=editing_entry,
        user_types=USER_TYPES,
        user_statuses=USER_STATUSES,
        actions=ACTIONS,
        decisions=DECISIONS,
        error=error,
    )


async def acl2_user_save(request: Request) -> Response:
    fields = await form(request)
    username = fields.get("username", "").strip()
    try:
        if not username:
            raise ValueError("give the user a name")
        if fields.get("user_type", "Normal") not in USER_TYPES:
            raise ValueError(f"the user type must be one of {', '.join(USER_TYPES)}")
        if fields.get("user_status", "enable") not in USER_STATUSES:
            raise ValueError(f"the status must be one of {', '.join(USER_STATUSES)}")
        user = UserInfo(
            username=username,
            password=fields.get("password") or None,
            user_type=fields.get("user_type", "Normal"),
            user_status=fields.get("user_status", "enable"),
        )
        errors = await ops(request).save_user(user)
    except EXPECTED as exc:
        return redirect("/acl2", error=f"user {username} not saved: {describe(exc)}")
    return _outcome(f"user {username} saved", errors, "/acl2")


async def acl2_user_delete(request: Request) -> Response:
    username = (await form(request)).get("username", "").strip()
    errors, error = await attempt(ops(request).delete_user(username))
    if error:
        return redirect("/acl2", error=f"user {username} not deleted: {error}")
    return _outcome(f"user {username} deleted", errors, "/acl2")


async def acl2_policy_save(request: Request) -> Response:
    fields = await form_lists(request)

    def one(name: str) -> str:
        return fields.get(name, [""])[-1].strip()

    subject = one("subject")
    try:
        subject = _subject(subject)
        resources = _resources(one("resources"))
        actions = [a for a in fields.get("actions", []) if a]
        if not actions or any(a not in ACTIONS for a in actions):
            raise ValueError(f"choose at least one action of {', '.join(ACTIONS)}")
        decision = one("decision")
        if decision not in DECISIONS:
            raise ValueError(f"the decision must be one of {', '.join(DECISIONS)}")
        errors = await ops(request).save_policy(
            subject, resources, actions, decision, _items(one("source_ips"))
        )
    except EXPECTED as exc:
        return redirect("/acl2", error=f"policy of {subject} not saved: {describe(exc)}")
    return _outcome(f"policy of {subject} saved", errors, "/acl2")


async def acl2_policy_delete(request: Request) -> Response:
    fields = await form(request)
    subject = fields.get("subject", "").strip()
    resource = fields.get("resource", "").strip() or None
    policy_type = fields.get("policy_type", "").strip() or None
    errors, error = await attempt(ops(request).delete_policy(subject, resource, policy_type))
    what = f"policy of {subject}" + (f" on {resource}" if resource else "")
    if error:
        return redirect("/acl2", error=f"{what} not deleted: {error}")
    return _outcome(f"{what} deleted", errors, "/acl2")


# -- dead letters -------------------------------------------------------------------------------


async def dlq_page(request: Request) -> Response:
    group = request.query_params.get("group", "").strip()
    messages = None
    error = None
    if group:
        messages, error = await attempt(ops(request).dlq_messages(group))
    groups, _ = await attempt(ops(request).group_names())
    return page(request, "dlq.html", group=group, groups=groups or [], messages=messages, error=error)


async def dlq_export(request: Request) -> Response:
    group = request.query_params.get("group", "").strip()
    fmt = request.query_params.get("format", "json")
    chosen = set(request.query_params.getlist("id"))
    messages, error = await attempt(ops(request).dlq_messages(group))
    if error:
        return PlainTextResponse(f"dead letters of {group!r} not exported: {error}\n", status_code=502)
    if chosen:
        messages = [m for m in messages if m.msg_id in chosen]
    name = f"dlq-{group}.{'csv' if fmt == 'csv' else 'json'}"
    disposition = {"Content-Disposition": f'attachment; filename="{urllib.parse.quote(name)}"'}
    if fmt == "csv":
        return Response(render.messages_csv(messages), media_type="text/csv", headers=disposition)
    document = json.dumps([render.message_document(m) for m in messages], indent=2, ensure_ascii=False)
    return Response(document, media_type="application/json", headers=disposition)


async def dlq_resend(request: Request) -> Response:
    fields = await form(request)
    group, msg_id = fields.get("group", ""), fields.get("id", "")
    back = f"/dlq?group={urllib.parse.quote(group)}"
    try:
        msg = await ops(request).dlq_message(group, msg_id)
        result = await ops(request).resend(msg, group)
    except EXPECTED as exc:
        return redirect(back, error=f"dead letter not resent: {describe(exc)}")
    return redirect(back, ok=f"dead letter {msg_id} resent to {group} as {result.msg_id}")


async def dlq_resend_chosen(request: Request) -> Response:
    fields = await form_lists(request)
    group = (fields.get("group") or [""])[-1]
    chosen = set(fields.get("id") or [])
    back = f"/dlq?group={urllib.parse.quote(group)}"
    done = 0
    try:
        if not chosen:
            raise ValueError("choose the dead letters to resend")
        letters = [m for m in await ops(request).dlq_messages(group) if m.msg_id in chosen]
        for msg in letters:
            await ops(request).resend(msg, group)
            done += 1
    except EXPECTED as exc:
        return redirect(back, error=f"{done} dead letters resent, then: {describe(exc)}")
    return redirect(back, ok=f"{done} dead letters resent to {group}")


# -- history ------------------------------------------------------------------------------------


def chart_json(data: dict[str, Any]) -> str:
    """JSON to embed in a ``<script>`` element: ``<`` escaped, so no value can end it."""
    return json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")


async def history_page(request: Request) -> Response:
    settings: Settings = request.app.state.settings
    store: HistoryStore = request.app.state.history
    collector: Collector | None = request.app.state.collector
    text = request.query_params.get("date", "").strip()
    error = None
    try:
        day = date.fromisoformat(text) if text else date.today()
    except ValueError:
        error = f"not a date: {text!r} (YYYY-MM-DD)"
        day = date.today()
    history = await asyncio.to_thread(store.read, day)
    top = history.top()
    topics = sorted(history.topic_tps)
    topic = request.query_params.get("topic", "").strip() or (top[0][0] if top else "")
    data = {
        "brokerPutTps": history.broker_put,
        "brokerGetTps": history.broker_get,
        "topicTps": {topic: history.topic_tps[topic]} if topic in history.topic_tps else {},
    }
    return page(
        request,
        "history.html",
        day=day.isoformat(),
        days=[d.isoformat() for d in store.days()],
        history=history,
        top=top,
        topics=topics,
        topic=topic,
        data=chart_json(data),
        collector=collector,
        data_dir=str(settings.data_dir),
        keep_days=settings.history_days,
        error=error or (collector.last_error if collector and day == date.today() else None),
    )


# -- live figures -------------------------------------------------------------------------------


async def live(request: Request) -> Response:
    sampler: LiveSampler = request.app.state.sampler
    await sampler.wanted()
    return JSONResponse(sampler.to_json())


# -- login --------------------------------------------------------------------------------------


async def login_page(request: Request) -> Response:
    return page(request, "login.html", next=request.query_params.get("next", "/"))


async def login(request: Request) -> Response:
    settings: Settings = request.app.state.settings
    fields = await form(request)
    target = fields.get("next", "/")
    if not target.startswith("/") or target.startswith("//"):
        target = "/"
    if settings.sessions is None:
        return redirect(target)
    name = fields.get("username", "")
    client = request.client.host if request.client else "unknown"
    throttle: LoginThrottle = request.app.state.login_throttle
    wait = throttle.locked_for(client, name)
    if wait > 0:
        log.warning("login for %r from %s refused: locked for %.0f s after failed logins", name, client, wait)
        return page(
            request,
            "login.html",
            status=429,
            next=target,
            error=f"too many failed logins: try again in {math.ceil(wait)} s",
        )
    user = settings.sessions.login(name, fields.get("password", ""))
    if user is None:
        throttle.failed(client, name)
        log.warning("failed login for %r from %s", name, client)
        return redirect(f"/login?next={urllib.parse.quote(target)}", error="wrong user name or password")
    throttle.succeeded(client, name)
    response = redirect(target)
    response.set_cookie(
        SESSION_COOKIE, settings.sessions.token(user), httponly=True, samesite="strict", max_age=12 * 3600
    )
    return response


async def logout(request: Request) -> Response:
    response = redirect("/login", ok="logged out")
    response.delete_cookie(SESSION_COOKIE)
    return response


#: Sent with every response. The pages load only their own script and stylesheet (no inline
#: script, handler or style), may not be framed (clickjacking) and post only to the dashboard.
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}


class Guard(BaseHTTPMiddleware):
    """Login (when a users file is given), admin-only changes, same-origin posts, and the
    last line of defence: an unexpected failure becomes an error page, never a dead server."""

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        response = await self._guarded(request, call_next)
        response.headers.update(SECURITY_HEADERS)
        if request.url.scheme == "https":
            response.headers["Strict-Transport-Security"] = "max-age=31536000"
        return response

    async def _guarded(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        settings: Settings = request.app.state.settings
        path = request.url.path
        request.state.user = None
        if request.method == "POST":
            origin = request.headers.get("origin")
            if origin and urllib.parse.urlsplit(origin).netloc != request.headers.get("host"):
                return PlainTextResponse("cross-site form posts are refused\n", status_code=403)
        if settings.sessions is not None and not path.startswith("/static/") and path != "/login":
            user = settings.sessions.user_of(request.cookies.get(SESSION_COOKIE))
            if user is None:
                if path.startswith("/api/"):
                    return JSONResponse({"error": "log in first"}, status_code=401)
                return RedirectResponse(f"/login?next={urllib.parse.quote(path)}", status_code=303)
            request.state.user = user
            if request.method == "POST" and path != "/logout" and not user.admin:
                return page(
                    request,
                    "error.html",
                    status=403,
                    error=f"{user.name} may look but not change: admins only",
                )
        try:
            return await call_next(request)
        except Exception as exc:
            log.exception("%s %s failed", request.method, path)
            return page(request, "error.html", status=500, error=describe(exc))


def create_app(settings: Settings) -> Starlette:
    """The dashboard for the cluster behind ``settings.namesrv``."""

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        operations = ClusterAccess(
            settings.namesrv,
            options=ClientOptions(
                request_timeout=settings.request_timeout,
                tls=settings.tls,
                tls_ca_file=settings.tls_ca_file,
                tls_verify=settings.tls_verify,
                security_token=settings.security_token,
            ),
            access_key=settings.access_key,
            secret_key=settings.secret_key,
        )
        await operations.start()
        sampler = LiveSampler(operations, settings.refresh)
        sampler.start()
        monitor = GroupMonitor(operations, settings.data_dir / "monitors.json")
        store = HistoryStore(settings.data_dir, settings.history_days)
        collector = None
        if settings.collect_interval > 0:
            collector = Collector(operations, store, settings.collect_interval, after_sample=monitor.check)
            collector.start()
        app.state.ops = operations
        app.state.sampler = sampler
        app.state.monitor = monitor
        app.state.history = store
        app.state.collector = collector
        try:
            yield
        finally:
            if collector is not None:
                await collector.stop()
            await sampler.stop()
            await operations.shutdown()

    routes: list[tuple[str, Handler, list[str]]] = [
        ("/", cluster_page, ["GET"]),
        ("/broker", broker_page, ["GET"]),
        ("/broker/config", broker_config_update, ["POST"]),
        ("/controller", controller_page, ["GET"]),
        ("/controller/elect", controller_elect, ["POST"]),
        ("/topics", topics_page, ["GET"]),
        ("/topics/create", topic_create, ["POST"]),
        ("/topic/update", topic_update, ["POST"]),
        ("/topic", topic_page, ["GET"]),
        ("/topic/delete", topic_delete, ["POST"]),
        ("/topic/send", topic_send, ["POST"]),
        ("/topic/reset", topic_reset, ["POST"]),
        ("/groups", groups_page, ["GET"]),
        ("/group", group_page, ["GET"]),
        ("/group/reset", group_reset, ["POST"]),
        ("/group/skip", group_skip, ["POST"]),
        ("/group/delete", group_delete, ["POST"]),
        ("/group/settings", group_settings_update, ["POST"]),
        ("/group/monitor", group_monitor_update, ["POST"]),
        ("/group/client", client_page, ["GET"]),
        ("/producers", producers_page, ["GET"]),
        ("/messages", messages_page, ["GET"]),
        ("/message", message_page, ["GET"]),
        ("/message/resend", message_resend, ["POST"]),
        ("/trace", trace_page, ["GET"]),
        ("/acl", acl_page, ["GET"]),
        ("/acl/account", acl_account_update, ["POST"]),
        ("/acl/delete", acl_account_delete, ["POST"]),
        ("/acl/white", acl_white_update, ["POST"]),
        ("/acl2", acl2_page, ["GET"]),
        ("/acl2/user", acl2_user_save, ["POST"]),
        ("/acl2/user/delete", acl2_user_delete, ["POST"]),
        ("/acl2/policy", acl2_policy_save, ["POST"]),
        ("/acl2/policy/delete", acl2_policy_delete, ["POST"]),
        ("/dlq", dlq_page, ["GET"]),
        ("/dlq/export", dlq_export, ["GET"]),
        ("/dlq/resend", dlq_resend, ["POST"]),
        ("/dlq/resend-chosen", dlq_resend_chosen, ["POST"]),
        ("/history", history_page, ["GET"]),
        ("/api/live", live, ["GET"]),
        ("/login", login_page, ["GET"]),
        ("/login", login, ["POST"]),
        ("/logout", logout, ["POST"]),
    ]
    app = Starlette(
        routes=[
            *(Route(path, fn, methods=methods) for path, fn, methods in routes),
            Mount("/static", StaticFiles(packages=[("aiorocketmq.dashboard", "static")]), name="static"),
        ],
        middleware=[Middleware(Guard)],
        lifespan=lifespan,
    )
    app.state.settings = settings
    app.state.login_throttle = LoginThrottle()
    return app
