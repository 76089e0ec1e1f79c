"""What ``mqadmin`` and ``mqbench`` share: RocketMQ-style option values (``true``/``false``
booleans, ``currentTimeMillis|yyyy-MM-dd#HH:mm:ss:SSS`` timestamps), Java's human time format,
aligned tables, JSON output, ACL credentials and TLS options, and the exit-code convention: 0 done, 1 failed (one line on
stderr saying why), 2 bad arguments (argparse prints the usage)."""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import sys
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from aiorocketmq.client.credentials import ACCESS_KEY_VARS, SECRET_KEY_VARS, resolve_credentials
from aiorocketmq.protocol.acl import Credentials
from aiorocketmq.protocol.body import MessageQueue
from aiorocketmq.protocol.message import MessageExt

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

#: RocketMQ's ``UtilAll.YYYY_MM_DD_HH_MM_SS_SSS``, the form its tools accept for a time.
JAVA_TIMESTAMP_FORMAT = "%Y-%m-%d#%H:%M:%S:%f"


class CommandFailed(Exception):
    """A command could not do what was asked; the message is the reason shown to the user."""


class Parser(argparse.ArgumentParser):
    """An argument parser without prefix abbreviations: RocketMQ's multi-letter short options
    (``-ri``, ``-ct``) must never be read as an abbreviation of another option."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)


def parse_bool(text: str) -> bool:
    """``true``/``false`` (as RocketMQ's tools take them; also ``1``/``0``, ``yes``/``no``)."""
    value = text.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def positive_int(text: str) -> int:
    value = non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def non_negative_int(text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number between 0 and 1, got {value}")
    return value


def timestamp_millis(text: str) -> int:
    """A point in time as epoch milliseconds: ``currentTimeMillis`` digits, RocketMQ's
    ``yyyy-MM-dd#HH:mm:ss:SSS`` (local time), or ISO 8601."""
    value = text.strip()
    if value.isdigit():
        return int(value)
    for parse in (_parse_java_time, datetime.fromisoformat):
        try:
            return int(parse(value).timestamp() * 1000)
        except ValueError:
            continue
    raise argparse.ArgumentTypeError(
        f"expected currentTimeMillis, yyyy-MM-dd#HH:mm:ss:SSS or an ISO 8601 time, got {text!r}"
    )


def _parse_java_time(value: str) -> datetime:
    # %f reads up to six digits; RocketMQ's SSS is milliseconds, which %f reads as a fraction too.
    return datetime.strptime(value, JAVA_TIMESTAMP_FORMAT)


def human_time(millis: int) -> str:
    """RocketMQ's ``timeMillisToHumanString2``: ``yyyy-MM-dd HH:mm:ss,SSS`` in local time."""
    moment = datetime.fromtimestamp(millis / 1000)
    return moment.strftime("%Y-%m-%d %H:%M:%S,") + f"{millis % 1000:03d}"


def date_time(millis: int) -> str:
    """``yyyy-MM-dd HH:mm:ss`` in local time (RocketMQ's ``YYYY_MM_DD_HH_MM_SS``)."""
    return datetime.fromtimestamp(millis / 1000).strftime("%Y-%m-%d %H:%M:%S")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    """Rows under headers, each column as wide as its widest cell; numbers right-aligned."""
    cells = [[str(cell) for cell in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in cells:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    numeric = [
        bool(rows) and all(isinstance(row[i], int | float) and not isinstance(row[i], bool) for row in rows)
        for i in range(len(headers))
    ]

    def line(values: Sequence[str], align_numbers: bool) -> str:
        parts = [
            value.rjust(width) if align_numbers and is_number else value.ljust(width)
            for value, width, is_number in zip(values, widths, numeric)
        ]
        return "  ".join(parts).rstrip()

    return [line(headers, True), *(line(row, True) for row in cells)]


def key_values(pairs: Sequence[tuple[str, Any]], separator: str = ": ") -> list[str]:
    """``key: value`` lines with the keys padded to one width."""
    width = max((len(key) for key, _ in pairs), default=0)
    return [f"{key.ljust(width)}{separator}{value}" for key, value in pairs]


def queue_text(queue: MessageQueue) -> str:
    """A queue as RocketMQ's tools print it."""
    return f"MessageQueue [topic={queue.topic}, brokerName={queue.broker_name}, queueId={queue.queue_id}]"


def queue_json(queue: MessageQueue) -> dict[str, Any]:
    return {"topic": queue.topic, "brokerName": queue.broker_name, "queueId": queue.queue_id}


def message_json(msg: MessageExt, charset: str = "utf-8") -> dict[str, Any]:
    """A stored message with RocketMQ's field names; a body that does not decode in
    ``charset`` is given in base64 (``bodyEncoding`` says which)."""
    try:
        body, encoding = msg.body.decode(charset), charset
    except UnicodeDecodeError:
        body, encoding = base64.b64encode(msg.body).decode(), "base64"
    return {
        "msgId": msg.msg_id,
        "offsetMsgId": msg.offset_msg_id,
        "topic": msg.topic,
        "brokerName": msg.broker_name,
        "queueId": msg.queue_id,
        "queueOffset": msg.queue_offset,
        "commitLogOffset": msg.commit_log_offset,
        "tags": msg.tags,
        "keys": msg.keys,
        "flag": msg.flag,
        "sysFlag": msg.sys_flag,
        "reconsumeTimes": msg.reconsume_times,
        "bornTimestamp": msg.born_timestamp,
        "bornHost": msg.born_host,
        "storeTimestamp": msg.store_timestamp,
        "storeHost": msg.store_host,
        "storeSize": msg.store_size,
        "bodyCRC": msg.body_crc,
        "properties": dict(msg.properties),
        "body": body,
        "bodyEncoding": encoding,
    }


def message_text(msg: MessageExt) -> str:
    """A one-line description of a stored message, with the fields RocketMQ's
    ``MessageExt.toString`` shows."""
    properties = ", ".join(f"{k}={v}" for k, v in msg.properties.items())
    return (
        f"MessageExt [brokerName={msg.broker_name}, queueId={msg.queue_id}, storeSize={msg.store_size}, "
        f"queueOffset={msg.queue_offset}, sysFlag={msg.sys_flag}, bornTimestamp={msg.born_timestamp}, "
        f"bornHost=/{msg.born_host}, storeTimestamp={msg.store_timestamp}, storeHost=/{msg.store_host}, "
        f"msgId={msg.offset_msg_id}, commitLogOffset={msg.commit_log_offset}, bodyCRC={msg.body_crc}, "
        f"reconsumeTimes={msg.reconsume_times}, topic={msg.topic}, flag={msg.flag}, "
        f"properties={{{properties}}}]"
    )


def write_json(document: Any, out: TextIO = sys.stdout) -> None:
    out.write(json.dumps(document, indent=2, ensure_ascii=False, default=str))
    out.write("\n")


def one_line(exc: BaseException) -> str:
    """An exception as one line of text (remarks from servers may span several)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text


def quiet_logging(verbose: bool) -> None:
    """SDK logs go to stderr only when asked: a failure must read as one line."""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.CRITICAL,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


# -- credentials and TLS ------------------------------------------------------------------------

#: RocketMQ's tools read ``accessKey``/``secretKey`` from ``$ROCKETMQ_HOME/conf/tools.yml``.
TOOLS_YML = "conf/tools.yml"


def tool_credentials(access_key: str | None = None, secret_key: str | None = None) -> Credentials | None:
    """The credentials a tool signs with: each key as given, else as the environment gives it
    (:func:`~aiorocketmq.client.credentials.env_credentials`: ``$ROCKETMQ_ACCESS_KEY``,
    ``$ROCKETMQ_SECRET_KEY``, ``$ROCKETMQ_SECURITY_TOKEN`` or their aliases), else
    ``$ROCKETMQ_HOME/conf/tools.yml`` as RocketMQ's tools read it; None when none is set.
    Raises :class:`CommandFailed` for half a pair."""
    try:
        given = resolve_credentials(access_key, secret_key)
    except ValueError as exc:
        raise CommandFailed(str(exc)) from None
    if given is not None:
        return given
    ak = sk = None
    home = os.environ.get("ROCKETMQ_HOME")
    if home:
        path = Path(home) / TOOLS_YML
        if path.is_file():
            import yaml  # the server extra: the SDK's tools need it only here

            try:
                data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
            except (OSError, yaml.YAMLError) as exc:
                raise CommandFailed(f"cannot read {path}: {exc}") from None
            if isinstance(data, dict):
                ak = str(data.get("accessKey") or "") or None
                sk = str(data.get("secretKey") or "") or None
    if ak is None and sk is None:
        return None
    if ak is None or sk is None:
        raise CommandFailed(
            f"ACL credentials need both an access key and a secret key (${ACCESS_KEY_VARS[0]}, ${SECRET_KEY_VARS[0]})"
        )
    return Credentials(ak, sk, None)


def add_tls_options(parser: argparse.ArgumentParser) -> None:
    """``--tls`` (default ``$ROCKETMQ_TLS_ENABLE``), ``--tlsCaFile``, ``--tlsNoVerify``."""
    parser.add_argument(
        "--tls",
        action="store_true",
        default=os.environ.get("ROCKETMQ_TLS_ENABLE", "").lower() == "true",
        help="talk TLS to every server (default: $ROCKETMQ_TLS_ENABLE=true)",
    )
    parser.add_argument(
        "--tlsCaFile",
        dest="tls_ca_file",
        metavar="FILE",
        help="CA certificates to check servers against (default: the system store)",
    )
    parser.add_argument(
        "--tlsNoVerify",
        dest="tls_no_verify",
        action="store_true",
        help="do not check the server's certificate",
    )
