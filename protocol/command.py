"""The remoting frame: :class:`RemotingCommand`, its three header serializations, and an
incremental :class:`FrameDecoder`.

Frame layout (docs/protocol.md §1.2)::

    i32 totalLen | i32 (serializeType << 24 | headerLen) | header | body

``totalLen`` counts everything after itself. Headers come as JSON (type 0, what every real
client speaks), ROCKETMQ binary (type 1, Java and Go can choose it) or msgpack (type 2, our own
SDK only). This module is sans-IO: bytes in, commands out, and back.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from typing import Any

import msgpack
from pydantic_core import from_json, to_json

from .codes import CURRENT_VERSION, LanguageCode, RequestCode, ResponseCode, RpcFlag, SerializeType
from .errors import ProtocolError
from .speedups import compiled as _compiled

DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024
_MAX_HEADER_LENGTH = 0xFFFFFF

_JSON = SerializeType.JSON.value
_ROCKETMQ = SerializeType.ROCKETMQ.value
_MSGPACK = SerializeType.MSGPACK.value
_RESPONSE = RpcFlag.RESPONSE.value
_ONEWAY = RpcFlag.ONEWAY.value

_FRAME_HEAD = struct.Struct(">iI")
_U32 = struct.Struct(">I")
_BIN_FIXED = struct.Struct(">hBhiii")  # code, language, version, opaque, flag, remark length
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

_TYPE_NAMES = {t.value: t.name for t in SerializeType}
_LANGUAGE_NAMES = {code.value: code.name for code in LanguageCode}
_LANGUAGE_CODES = {code.name: code.value for code in LanguageCode}

#: The language this project's processes announce.
LANGUAGE = LanguageCode.PYTHON.name


class RemotingCommand:
    """One request or response.

    ``ext_fields`` is the "custom header": a flat map of scalar values. Decoders hand it over
    with string values for JSON and ROCKETMQ frames (numbers and booleans that some clients
    send raw are turned into strings) and native values for msgpack frames; encoders write
    strings for JSON and ROCKETMQ, as every real client requires. Typed access goes through
    the header models in :mod:`aiorocketmq.protocol.headers`.
    """

    __slots__ = (
        "code",
        "language",
        "version",
        "opaque",
        "flag",
        "remark",
        "ext_fields",
        "body",
        "serialize_type",
    )

    def __init__(
        self,
        code: int,
        *,
        opaque: int = 0,
        flag: int = 0,
        remark: str | None = None,
        ext_fields: dict[str, Any] | None = None,
        body: bytes = b"",
        language: str = LANGUAGE,
        version: int = CURRENT_VERSION,
        serialize_type: int = _JSON,
    ) -> None:
        self.code = code
        self.language = language
        self.version = version
        self.opaque = opaque
        self.flag = flag
        self.remark = remark
        self.ext_fields: dict[str, Any] = ext_fields if ext_fields is not None else {}
        self.body = body
        self.serialize_type = serialize_type

    # -- construction -------------------------------------------------------------------

    @classmethod
    def request(
        cls,
        code: int,
        ext_fields: dict[str, Any] | None = None,
        body: bytes = b"",
        *,
        oneway: bool = False,
        serialize_type: int = _JSON,
        remark: str | None = None,
    ) -> RemotingCommand:
        """A request; the connection that sends it assigns the opaque."""
        return cls(
            code,
            flag=_ONEWAY if oneway else 0,
            ext_fields=ext_fields,
            body=body,
            serialize_type=serialize_type,
            remark=remark,
        )

    def response(
        self,
        code: int = ResponseCode.SUCCESS,
        remark: str | None = None,
        ext_fields: dict[str, Any] | None = None,
        body: bytes = b"",
    ) -> RemotingCommand:
        """The response to this request: same opaque, same serialization (docs/protocol.md §1.5)."""
        return _command(
            code,
            LANGUAGE,
            CURRENT_VERSION,
            self.opaque,
            _RESPONSE,
            remark,
            ext_fields if ext_fields is not None else {},
            body,
            self.serialize_type,
        )

    # -- flags --------------------------------------------------------------------------

    @property
    def is_response(self) -> bool:
        return bool(self.flag & _RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & _ONEWAY)

    def __repr__(self) -> str:
        kind = "response" if self.flag & _RESPONSE else "request"
        name: str
        try:
            name = (ResponseCode if self.flag & _RESPONSE else RequestCode)(self.code).name
        except ValueError:
            name = str(self.code)
        remark = f" remark={self.remark!r}" if self.remark else ""
        return (
            f"<RemotingCommand {kind} {name} opaque={self.opaque} flag={self.flag}"
            f"{remark} ext={self.ext_fields!r} body={len(self.body)}B>"
        )

    # -- encoding -----------------------------------------------------------------------

    def encode(self) -> bytes:
        """The complete frame, length prefix included."""
        st = self.serialize_type
        try:
            if st == _JSON:
                header = _encode_json_header(self)
            elif st == _ROCKETMQ:
                header = _encode_rocketmq_header(self)
            elif st == _MSGPACK:
                header = _encode_msgpack_header(self)
            else:
                raise ProtocolError(f"cannot encode with unknown serialize type {st}")
        except (struct.error, OverflowError, TypeError, ValueError) as exc:
            # A field that the chosen serialization cannot carry (a code beyond i16 in a
            # ROCKETMQ header, an int beyond 64 bits in msgpack, an unserializable value).
            raise ProtocolError(f"cannot encode {self!r} as {_TYPE_NAMES.get(st, st)}: {exc}") from None
        header_len = len(header)
        if header_len > _MAX_HEADER_LENGTH:
            raise ProtocolError(f"header of {header_len} bytes does not fit the 24-bit length field")
        body = self.body
        return b"".join((_FRAME_HEAD.pack(4 + header_len + len(body), (st << 24) | header_len), header, body))


_new = object.__new__


def _command(
    code: int,
    language: str,
    version: int,
    opaque: int,
    flag: int,
    remark: str | None,
    ext_fields: dict[str, Any],
    body: bytes,
    serialize_type: int,
) -> RemotingCommand:
    # Positional slot filling: decoding and answering build two commands per request, and
    # the keyword-argument __init__ is a measurable part of that.
    cmd: RemotingCommand = _new(RemotingCommand)
    cmd.code = code
    cmd.language = language
    cmd.version = version
    cmd.opaque = opaque
    cmd.flag = flag
    cmd.remark = remark
    cmd.ext_fields = ext_fields
    cmd.body = body
    cmd.serialize_type = serialize_type
    return cmd


# -- header codecs --------------------------------------------------------------------------


def _to_wire_string(value: Any) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    return str(value)


def stringify_fields(fields: Mapping[str, Any]) -> dict[str, str]:
    """Every value as a string, ``None`` dropped: the form JSON and ROCKETMQ headers carry."""
    for value in fields.values():
        if type(value) is not str:
            break
    else:
        return fields  # type: ignore[return-value]
    # _to_wire_string inlined: this runs for every response header with a number in it.
    return {
        k: v if type(v) is str else "true" if v is True else "false" if v is False else str(v)
        for k, v in fields.items()
        if v is not None
    }


def _normalize_fields(raw: Any) -> dict[str, Any]:
    """extFields as decoded from JSON: accept raw numbers and booleans, keep strings."""
    if raw is None:
        return {}
    if type(raw) is not dict:
        raise ProtocolError(f"extFields must be a JSON object, got {type(raw).__name__}")
    for value in raw.values():
        if type(value) is not str:
            break
    else:
        return raw
    fields: dict[str, Any] = {}
    for key, value in raw.items():
        if value is None:
            continue
        if isinstance(value, (str, int, float)):  # bool is an int
            fields[key] = value if type(value) is str else _to_wire_string(value)
        else:
            raise ProtocolError(f"extFields[{key!r}] must be a scalar, got {type(value).__name__}")
    return fields


def _encode_json_header(cmd: RemotingCommand) -> bytes:
    header: dict[str, Any] = {
        "code": cmd.code,
        "extFields": stringify_fields(cmd.ext_fields),
        "flag": cmd.flag,
        "language": cmd.language,
        "opaque": cmd.opaque,
    }
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    header["serializeTypeCurrentRPC"] = "JSON"
    header["version"] = cmd.version
    return to_json(header)


def _encode_msgpack_header(cmd: RemotingCommand) -> bytes:
    header: dict[str, Any] = {
        "code": cmd.code,
        "opaque": cmd.opaque,
        "flag": cmd.flag,
        "language": cmd.language,
        "version": cmd.version,
        "extFields": cmd.ext_fields,
    }
    if cmd.remark is not None:
        header["remark"] = cmd.remark
    return msgpack.packb(header)


def _encode_rocketmq_header(cmd: RemotingCommand) -> bytes:
    remark = cmd.remark.encode() if cmd.remark else b""
    entries = []
    for key, value in stringify_fields(cmd.ext_fields).items():
        k = key.encode()
        v = value.encode()
        entries.append(_I16.pack(len(k)) + k + _I32.pack(len(v)) + v)
    ext = b"".join(entries)
    return b"".join(
        (
            _BIN_FIXED.pack(
                cmd.code,
                _LANGUAGE_CODES.get(cmd.language, LanguageCode.OTHER.value),
                cmd.version,
                cmd.opaque,
                cmd.flag,
                len(remark),
            ),
            remark,
            _I32.pack(len(ext)),
            ext,
        )
    )


_INT32_MIN = -(1 << 31)
_INT32_MAX = (1 << 31) - 1


def _int_field(header: Mapping[str, Any], key: str, default: int | None = None) -> int:
    # Java holds code, opaque, flag and version in ints; anything wider could not be echoed
    # back in a response (ROCKETMQ and msgpack encoders would fail), so it is refused here.
    value = header.get(key, default)
    if type(value) is not int:
        if value is None:
            raise ProtocolError(f"header has no {key!r}")
        try:
            value = int(value)
        except (TypeError, ValueError, OverflowError):
            raise ProtocolError(f"header field {key!r} must be an integer, got {value!r}") from None
    if _INT32_MIN <= value <= _INT32_MAX:
        return value
    raise ProtocolError(f"header field {key!r} = {value} does not fit a 32-bit integer")


def _command_from_mapping(header: Any, body: bytes, st: int, kind: str) -> RemotingCommand:
    if type(header) is not dict:
        raise ProtocolError(f"{kind} header must be an object, got {type(header).__name__}")
    get = header.get
    code = get("code")
    opaque = get("opaque", 0)
    flag = get("flag", 0)
    version = get("version", 0)
    # Inline check of the usual case (four ints in range); _int_field explains the rest.
    if not (
        type(code) is int
        and type(opaque) is int
        and type(flag) is int
        and type(version) is int
        and _INT32_MIN <= code <= _INT32_MAX
        and _INT32_MIN <= opaque <= _INT32_MAX
        and _INT32_MIN <= flag <= _INT32_MAX
        and _INT32_MIN <= version <= _INT32_MAX
    ):
        code = _int_field(header, "code")
        opaque = _int_field(header, "opaque", 0)
        flag = _int_field(header, "flag", 0)
        version = _int_field(header, "version", 0)
    remark = get("remark")
    if remark is not None and type(remark) is not str:
        remark = str(remark)
    language = get("language", "OTHER")
    if type(language) is not str:
        language = _LANGUAGE_NAMES.get(language, "OTHER") if type(language) is int else "OTHER"
    if st == _MSGPACK:
        fields = get("extFields") or {}
        if type(fields) is not dict:
            raise ProtocolError(f"extFields must be a map, got {type(fields).__name__}")
    else:
        fields = _normalize_fields(get("extFields"))
    return _command(code, language, version, opaque, flag, remark, fields, body, st)


def _decode_json_header(data: bytes, body: bytes) -> RemotingCommand:
    try:
        header = from_json(data)
    except ValueError as exc:
        raise ProtocolError(f"invalid JSON header: {exc}") from None
    return _command_from_mapping(header, body, _JSON, "JSON")


def _decode_msgpack_header(data: bytes, body: bytes) -> RemotingCommand:
    try:
        header = _unpackb(data)  # msgpack >= 1.0 decodes str as str by default
    except Exception as exc:  # msgpack raises several unrelated types for bad input
        raise ProtocolError(f"invalid msgpack header: {exc}") from None
    return _command_from_mapping(header, body, _MSGPACK, "msgpack")


def _decode_rocketmq_header(data: bytes, body: bytes) -> RemotingCommand:
    size = len(data)
    if size < 21:
        raise ProtocolError(f"ROCKETMQ header of {size} bytes is shorter than its 21-byte fixed part")
    code, language, version, opaque, flag, remark_len = _BIN_FIXED.unpack_from(data, 0)
    pos = 17
    if remark_len < 0 or pos + remark_len + 4 > size:
        raise ProtocolError(f"ROCKETMQ header remark length {remark_len} overruns the header")
    try:
        remark = data[pos : pos + remark_len].decode() if remark_len else None
        pos += remark_len
        (ext_len,) = _I32.unpack_from(data, pos)
        pos += 4
        if ext_len < 0 or pos + ext_len != size:
            raise ProtocolError(
                f"ROCKETMQ header extFields length {ext_len} does not match the header size {size}"
            )
        fields: dict[str, Any] = {}
        end = pos + ext_len
        while pos < end:
            if pos + 2 > end:
                raise ProtocolError("ROCKETMQ header extFields entry truncated in its key length")
            (key_len,) = _I16.unpack_from(data, pos)
            pos += 2
            if key_len < 0 or pos + key_len + 4 > end:
                raise ProtocolError(f"ROCKETMQ header key length {key_len} overruns extFields")
            key = data[pos : pos + key_len].decode()
            pos += key_len
            (value_len,) = _I32.unpack_from(data, pos)
            pos += 4
            if value_len < 0 or pos + value_len > end:
                raise ProtocolError(f"ROCKETMQ header value length {value_len} overruns extFields")
            if key:
                fields[key] = data[pos : pos + value_len].decode()
            pos += value_len
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"ROCKETMQ header holds invalid UTF-8: {exc}") from None
    return _command(
        code, _LANGUAGE_NAMES.get(language, "OTHER"), version, opaque, flag, remark, fields, body, _ROCKETMQ
    )


_unpackb = msgpack.unpackb

_HEADER_DECODERS = {
    _JSON: _decode_json_header,
    _ROCKETMQ: _decode_rocketmq_header,
    _MSGPACK: _decode_msgpack_header,
}


def decode_frame(frame: bytes | bytearray | memoryview) -> RemotingCommand:
    """Decode one frame given *without* its 4-byte total-length prefix."""
    size = len(frame)
    if size < 4:
        raise ProtocolError(f"frame of {size} bytes has no header-length word")
    (word,) = _U32.unpack_from(frame, 0)
    st = word >> 24
    header_len = word & _MAX_HEADER_LENGTH
    if header_len > size - 4:
        raise ProtocolError(f"header length {header_len} exceeds the frame's {size - 4} remaining bytes")
    decoder = _HEADER_DECODERS.get(st)
    if decoder is None:
        raise ProtocolError(f"unknown serialize type {st}")
    mv = memoryview(frame)
    return decoder(bytes(mv[4 : 4 + header_len]), bytes(mv[4 + header_len :]))


# -- the compiled codecs, when active (see .speedups) -------------------------------------------

#: The pure-Python codecs, whichever implementation is active (tests compare the two).
pure_command_from_mapping = _command_from_mapping
pure_decode_rocketmq_header = _decode_rocketmq_header
pure_encode_json_header = _encode_json_header
pure_encode_rocketmq_header = _encode_rocketmq_header

if _compiled is not None:
    _compiled.setup_commands(
        ProtocolError, RemotingCommand, _LANGUAGE_NAMES, _LANGUAGE_CODES, pure_command_from_mapping
    )
    _command_from_mapping = _compiled.command_from_mapping
    _decode_rocketmq_header = _compiled.decode_rocketmq_header
    _HEADER_DECODERS[_ROCKETMQ] = _decode_rocketmq_header
    _c_encode_json_header = _compiled.encode_json_header
    _c_encode_rocketmq_header = _compiled.encode_rocketmq_header

    # The compiled writers leave what they do not model (values other than str, int, bool
    # and None; fields out of range; unencodable text) to the pure ones, which word the errors.
    def _encode_json_header(cmd: RemotingCommand) -> bytes:
        return _c_encode_json_header(cmd) or pure_encode_json_header(cmd)

    def _encode_rocketmq_header(cmd: RemotingCommand) -> bytes:
        return _c_encode_rocketmq_header(cmd) or pure_encode_rocketmq_header(cmd)


#: The compiled frame splitter (FrameDecoder.feed's general loop), when active.
_split_frames = _compiled.split_frames if _compiled is not None else None


class FrameDecoder:
    """Incremental frame decoder: feed any chunking of the byte stream, get whole commands.

    After a :class:`ProtocolError` the stream position is lost; the connection must close.
    When good frames precede a bad one in the same chunk, :meth:`feed` returns the good ones
    and records the failure in :attr:`error` (raised again by the next feed), so a peer's
    earlier requests still get their answers before the connection closes.
    """

    __slots__ = ("_buffer", "error", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._buffer = bytearray()
        self.max_frame_size = max_frame_size
        self.error: ProtocolError | None = None

    @property
    def buffered(self) -> int:
        """Bytes held back waiting for the rest of a frame."""
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        if self.error is not None:
            raise self.error
        buffer = self._buffer
        if not buffer and type(data) is bytes and len(data) >= 8:
            # Exactly one whole frame per read is the common case; anything else (or anything
            # wrong) takes the general loop below, which also words the errors.
            total, word = _FRAME_HEAD.unpack_from(data, 0)
            if total + 4 == len(data) and 4 <= total <= self.max_frame_size:
                header_len = word & _MAX_HEADER_LENGTH
                decoder = _HEADER_DECODERS.get(word >> 24)
                if decoder is not None and header_len <= total - 4:
                    return [decoder(data[8 : 8 + header_len], data[8 + header_len :])]
        if buffer:
            buffer += data
            view: bytes | bytearray | memoryview = buffer
        else:
            view = data
        if _split_frames is not None:
            commands, pos, error = _split_frames(view, self.max_frame_size, _HEADER_DECODERS)
            if error is not None:
                if not commands:
                    raise error
                # Hand over the good frames that came before the bad one; the next feed fails.
                self.error = error
                return commands
            size = len(view)
        else:
            size = len(view)
            pos = 0
            commands = []
            max_frame = self.max_frame_size
            decoders = _HEADER_DECODERS
            try:
                while size - pos >= 8:
                    total, word = _FRAME_HEAD.unpack_from(view, pos)
                    if total < 4 or total > max_frame:
                        raise ProtocolError(
                            f"frame length {total} is outside the allowed range 4..{max_frame}"
                        )
                    # Judge the frame by its first 8 bytes, before waiting for the rest of it.
                    header_len = word & _MAX_HEADER_LENGTH
                    if header_len > total - 4:
                        raise ProtocolError(
                            f"header length {header_len} exceeds the frame's {total - 4} remaining bytes"
                        )
                    decoder = decoders.get(word >> 24)
                    if decoder is None:
                        raise ProtocolError(f"unknown serialize type {word >> 24}")
                    end = pos + 4 + total
                    if end > size:
                        break
                    header_end = pos + 8 + header_len
                    commands.append(decoder(bytes(view[pos + 8 : header_end]), bytes(view[header_end:end])))
                    pos = end
                if size - pos >= 4:
                    # Reject an oversized frame as soon as its length is known, not after buffering it.
                    (total,) = _I32.unpack_from(view, pos)
                    if total < 4 or total > max_frame:
                        raise ProtocolError(
                            f"frame length {total} is outside the allowed range 4..{max_frame}"
                        )
            except ProtocolError as exc:
                if not commands:
                    raise
                # Hand over the good frames that came before the bad one; the next feed fails.
                self.error = exc
                return commands
        if buffer:
            del buffer[:pos]
        elif pos < size:
            buffer += view[pos:]
        return commands
