"""The web application: Starlette routes rendering Jinja2 templates on the server, one JSON
endpoint for the live charts, the optional login, and the rule that no cluster failure ever
breaks a page: every handler turns an error into a message shown on the page it renders.

Forms post and redirect (the outcome travels in a short ``flash`` cookie), so reloading a page
repeats no action. Every asset comes from the package's ``static/`` folder.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.parse
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
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

from aiorocketmq.client import ClientOptions, MessageExt
from aiorocketmq.protocol.codes import PERM_READ_WRITE, MQVersion, Perm
from aiorocketmq.protocol.errors import MQError

from . import render
from .live import LiveSampler
from .operations import MAX_MESSAGES, Operations, describe
from .users import Sessions, User

log = logging.getLogger(__name__)

SESSION_COOKIE = "mqdashboard_session"
FLASH_COOKIE = "mqdashboard_flash"
#: Failures a page reports instead of failing: the cluster's and bad input.
EXPECTED = (MQError, OSError, ValueError, TimeoutError)

Handler = Callable[[Request], Awaitable[Response]]


@dataclass
class Settings:
    namesrv: str
    refresh: float = 5.0
    request_timeout: float = 3.0
    sessions: Sessions | None = None
    access_key: str | None = None
    secret_key: str | None = None


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


async def form(request: Request) -> dict[str, str]:
    """An urlencoded form's fields (the last value of a repeated one)."""
    body = (await request.body()).decode("utf-8", errors="replace")
    return {k: v[-1] for k, v in urllib.parse.parse_qs(body, keep_blank_values=True).items()}


def ops(request: Request) -> Operations:
    ops_: Operations = request.app.state.ops
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


# -- topics -------------------------------------------------------------------------------------


async def topics_page(request: Request) -> Response:
    text = request.query_params.get("q", "")
    show_system = request.query_params.get("system") == "1"
    topics, error = await attempt(ops(request).topics(text))
    rows = [t for t in topics or [] if show_system or t.kind == "normal"]
    return page(request, "topics.html", topics=rows, q=text, show_system=show_system, error=error)


async def topic_create(request: Request) -> Response:
    fields = await form(request)
    topic = fields.get("topic", "").strip()
    try:
        read = int_field(fields, "read_queues", 8)
        write = int_field(fields, "write_queues", 8)
        perm = int_field(fields, "perm", PERM_READ_WRITE, low=0, high=7)
        if not topic:
            raise ValueError("give the topic a name")
        await ops(request).create_topic(topic, read, write, perm)
    except EXPECTED as exc:
        return redirect("/topics", error=f"topic {topic!r} was not saved: {describe(exc)}")
    return redirect(
        f"/topic?name={urllib.parse.quote(topic)}",
        ok=f"topic {topic} saved: {read} read / {write} write queues, perm {perm_text(perm)}",
    )


async def topic_page(request: Request) -> Response:
    topic = request.query_params.get("name", "")
    detail, error = await attempt(ops(request).topic_detail(topic))
    return page(request, "topic.html", topic=topic, detail=detail, error=error)


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


async def groups_page(request: Request) -> Response:
    text = request.query_params.get("q", "")
    groups, error = await attempt(ops(request).groups(text))
    return page(request, "groups.html", groups=groups or [], q=text, error=error)


async def group_page(request: Request) -> Response:
    group = request.query_params.get("name", "")
    detail, error = await attempt(ops(request).group_detail(group))
    return page(request, "group.html", group=group, detail=detail, error=error, now=local_input(time.time()))


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
    _, error = await attempt(ops(request).delete_group(group, remove_offsets=fields.get("offsets") == "1"))
    if error:
        return redirect(
            f"/group?name={urllib.parse.quote(group)}", error=f"group {group} not deleted: {error}"
        )
    return redirect("/groups", ok=f"group {group} deleted")


# -- producers ----------------------------------------------------------------------------------


async def producers_page(request: Request) -> Response:
    group = request.query_params.get("group", "").strip()
    topic = request.query_params.get("topic", "").strip()
    connections = None
    error = None
    topics, topics_error = await attempt(ops(request).topics(with_routes=False))
    if group:
        connections, error = await attempt(ops(request).producer_connections(group, topic or None))
    return page(
        request,
        "producers.html",
        group=group,
        topic=topic,
        topics=[t.topic for t in topics or [] if t.kind == "normal"],
        connections=connections,
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
    messages: list[MessageExt] | None = None
    error = None
    if mode == "id" and msg_id:
        return redirect(f"/message?topic={urllib.parse.quote(topic)}&id={urllib.parse.quote(msg_id)}")
    if topic and mode == "key" and key:
        messages, error = await attempt(ops(request).messages_by_key(topic, key))
    elif topic and mode == "time":
        try:
            begin = parse_time(begin_text, now - 3600)
            end = parse_time(end_text, now)
            messages = await ops(request).messages_by_time(topic, begin, end)
        except EXPECTED as exc:
            error = describe(exc)
    return page(
        request,
        "messages.html",
        topic=topic,
        key=key,
        msg_id=msg_id,
        by=mode,
        begin=begin_text,
        end=end_text,
        messages=messages,
        limit=MAX_MESSAGES,
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
    messages, error = await attempt(ops(request).dlq_messages(group))
    if error:
        return PlainTextResponse(f"dead letters of {group!r} not exported: {error}\n", status_code=502)
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
    user = settings.sessions.login(fields.get("username", ""), fields.get("password", ""))
    if user is None:
        return redirect(f"/login?next={urllib.parse.quote(target)}", error="wrong user name or password")
    response = redirect(target)
    response.set_cookie(
        SESSION_COOKIE, settings.sessions.token(user), httponly=True, samesite="strict", max_age=12 * 3600
    )
    return response


async def logout(request: Request) -> Response:
    response = redirect("/login", ok="logged out")
    response.delete_cookie(SESSION_COOKIE)
    return response


class Guard(BaseHTTPMiddleware):
    """Login (when a users file is given), admin-only changes, same-origin posts, and the
    last line of defence: an unexpected failure becomes an error page, never a dead server."""

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
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
        operations = Operations(
            settings.namesrv,
            options=ClientOptions(request_timeout=settings.request_timeout),
            access_key=settings.access_key,
            secret_key=settings.secret_key,
        )
        await operations.start()
        sampler = LiveSampler(operations, settings.refresh)
        sampler.start()
        app.state.ops = operations
        app.state.sampler = sampler
        try:
            yield
        finally:
            await sampler.stop()
            await operations.shutdown()

    routes: list[tuple[str, Handler, list[str]]] = [
        ("/", cluster_page, ["GET"]),
        ("/topics", topics_page, ["GET"]),
        ("/topics/create", topic_create, ["POST"]),
        ("/topic", topic_page, ["GET"]),
        ("/topic/delete", topic_delete, ["POST"]),
        ("/topic/send", topic_send, ["POST"]),
        ("/groups", groups_page, ["GET"]),
        ("/group", group_page, ["GET"]),
        ("/group/reset", group_reset, ["POST"]),
        ("/group/skip", group_skip, ["POST"]),
        ("/group/delete", group_delete, ["POST"]),
        ("/producers", producers_page, ["GET"]),
        ("/messages", messages_page, ["GET"]),
        ("/message", message_page, ["GET"]),
        ("/message/resend", message_resend, ["POST"]),
        ("/dlq", dlq_page, ["GET"]),
        ("/dlq/export", dlq_export, ["GET"]),
        ("/dlq/resend", dlq_resend, ["POST"]),
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
    return app
