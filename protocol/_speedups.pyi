"""Types of the compiled codecs (protocol/_speedups.c); see :mod:`.speedups`."""

from collections.abc import Callable, Sequence
from typing import Any

def setup_commands(
    protocol_error: type[Exception],
    remoting_command: type,
    language_names: dict[int, str],
    language_codes: dict[str, int],
    pure_command_from_mapping: Callable[[Any, bytes, int, str], Any],
) -> None: ...
def setup_records(
    protocol_error: type[Exception],
    message_ext: type,
    crc32: Callable[[bytes], int],
    decompress_body: Callable[[bytes, int], bytes],
) -> None: ...
def java_hash(text: str, /) -> int: ...
def normalize_fields(raw: Any, /) -> dict[str, Any]: ...
def command_from_mapping(header: Any, body: bytes, st: int, kind: str, /) -> Any: ...
def decode_rocketmq_header(data: bytes, body: bytes, /) -> Any: ...
def encode_json_header(cmd: Any, /) -> bytes | None: ...
def encode_rocketmq_header(cmd: Any, /) -> bytes | None: ...
def decode_properties(text: str, /) -> dict[str, str]: ...
def encode_records(
    msgs: Sequence[Any],
    prefix: bytes,
    queue_offset: int,
    now_ms: int,
    phys: int,
    store_host: bytes,
    max_body: int,
    /,
) -> tuple[bytes, list[int], list[int], list[int], int] | int | None: ...
def decode_record(buf: Any, pos: int, check_crc: bool, decompress: bool, /) -> tuple[Any, int] | None: ...
def split_frames(
    data: bytes | bytearray | memoryview,
    max_frame: int,
    decoders: dict[int, Callable[[bytes, bytes], Any]],
    /,
) -> tuple[list[Any], int, Exception | None]: ...
def index_put_many(
    view: Any,
    items: Sequence[tuple[str, int, int]],
    start: int,
    count: int,
    index_num: int,
    slot_num: int,
    begin_timestamp: int,
    /,
) -> tuple[int, int, int | None, int, int, int] | None: ...
def index_build_batch(
    view: Any,
    topic: str,
    msgs: Sequence[Any],
    offsets: Sequence[int],
    stamps: Sequence[int],
    end_phy: int,
    count: int,
    index_num: int,
    slot_num: int,
    begin_timestamp: int,
    /,
) -> tuple[int, int, int | None, int, int, int] | None: ...
def cq_put_entries(
    view: Any, pos: int, offsets: list[int], sizes: list[int], tags_codes: list[int], /
) -> int | None: ...
def offset_msg_ids(host_hex: str, offsets: list[int], /) -> list[str] | None: ...
def encode_batch(messages: list[Any], max_props: int, /) -> bytes | None: ...
def prepare_batch(
    messages: list[Any],
    topic: str,
    max_body: int,
    max_props: int,
    uniq_key: str,
    delay_key: str,
    next_id: Callable[[], str],
    counter: Any,
    /,
) -> tuple[bytes, str] | None: ...
def setup_send_header(
    send_header_class: type, v1_names: tuple[str, ...], v2_names: tuple[str, ...], default_topic: str, /
) -> None: ...
def send_header(fields: Any, v2: bool, /) -> Any: ...

class GroupSync:
    """The SYNC_FLUSH group commit's disk thread (broker/store/flush.py's PureGroupSync twin)."""

    def submit(self, fds: tuple[int, ...], directory: int = -1, /) -> None: ...
    def collect(self) -> tuple[int, int, int, int]: ...
    def fileno(self) -> int: ...
    def close(self) -> None: ...
