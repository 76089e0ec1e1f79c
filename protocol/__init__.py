"""The RocketMQ remoting protocol (4.x, and what RocketMQ 5 added to it: topic attributes,
static-topic mappings): codes, frames, headers, bodies, messages, transport.

Pure codecs plus one asyncio transport; nothing here imports the broker, the name server or
the client. See ``docs/protocol.md`` for the contract this package implements.
"""

from .codes import (
    CURRENT_VERSION,
    LanguageCode,
    MessageSysFlag,
    MQVersion,
    Perm,
    PullSysFlag,
    RequestCode,
    ResponseCode,
    RpcFlag,
    SerializeType,
)
from .command import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, RemotingCommand, decode_frame
from .errors import (
    BrokerError,
    ClientError,
    ConnectionClosedError,
    MQError,
    NoRouteError,
    ProtocolError,
    RemotingError,
    RequestTimeoutError,
    error_for_code,
)
from .message import Message, MessageExt, PropertyKey
from .transport import Connection, Server, connect

__all__ = [
    "CURRENT_VERSION",
    "DEFAULT_MAX_FRAME_SIZE",
    "BrokerError",
    "ClientError",
    "Connection",
    "ConnectionClosedError",
    "FrameDecoder",
    "LanguageCode",
    "MQError",
    "MQVersion",
    "Message",
    "MessageExt",
    "MessageSysFlag",
    "NoRouteError",
    "Perm",
    "PropertyKey",
    "ProtocolError",
    "PullSysFlag",
    "RemotingCommand",
    "RemotingError",
    "RequestCode",
    "RequestTimeoutError",
    "ResponseCode",
    "RpcFlag",
    "SerializeType",
    "Server",
    "connect",
    "decode_frame",
    "error_for_code",
]
