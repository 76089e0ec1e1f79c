"""The replication port (``listenPort + 1``) under attack, with real brokers and real sockets.

With the replication account configured (``haAuthAccessKey``/``haAuthSecretKey``) a stranger
gets the master's challenge and nothing of the commit log, its acknowledgements cannot make a
SYNC_MASTER answer SEND_OK, a slave with the wrong secret is refused, and a slave with the right
one replicates and acknowledges; with ``haTlsEnable`` (mutual here) a TLS slave replicates and a
plain-text peer or a certificate from another CA gets nothing. Always: the port takes at most
``haMaxConnections`` connections, and 1,000 peers that never read leave the broker's memory
bounded. The same fake slave with the handshake off (Apache's protocol) shows what the guards
are guarding against.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import struct
from pathlib import Path
from typing import Any

import pytest

from aiorocketmq.broker.config import BrokerConfig
from aiorocketmq.broker.ha import wire
from aiorocketmq.broker.ha.security import HaSecurity
from aiorocketmq.protocol.codes import RequestCode, ResponseCode
from aiorocketmq.protocol.settings import ConfigError
from aiorocketmq.protocol.tls import client_context
from aiorocketmq.protocol.transport import Connection, connect
from tests.broker.ha.support import has_slaves, held_port_pair, runtime_info, start_pair, start_slave
from tests.broker.requests import call, send
from tests.cluster import BrokerProcess, Cluster
from tests.support import wait_until

from .pki import make_pki

TOPIC = "HaSecurity"
#: Every body carries this, so a peer's bytes can be searched for the log's contents.
MARK = b"commit-log-body:"
ACCOUNT: dict[str, Any] = {"haAuthAccessKey": "replicator", "haAuthSecretKey": "s3cret-of-the-cluster"}
#: What a SYNC_MASTER answers when no slave acknowledged in time.
NOT_REPLICATED = {ResponseCode.SLAVE_NOT_AVAILABLE, ResponseCode.FLUSH_SLAVE_TIMEOUT}


@pytest.fixture
async def cluster(tmp_path: Path) -> Any:
    cluster = Cluster(tmp_path)
    await cluster.start_namesrv()
    try:
        yield cluster
    finally:
        await cluster.stop()


async def start_master(cluster: Cluster, **settings: Any) -> BrokerProcess:
    with held_port_pair() as port:
        return await cluster.start_broker(
            "broker-a", listenPort=port, **{"brokerRole": "SYNC_MASTER", "slaveTimeout": 1000, **settings}
        )


async def preload(port: int, count: int, size: int) -> Connection:
    """``count`` messages of ``size`` bytes (a SYNC_MASTER without slave stores them and
    answers SLAVE_NOT_AVAILABLE); the open connection."""
    conn = await connect("127.0.0.1", port, timeout=5.0)
    body = MARK + b"x" * (size - len(MARK))
    for _ in range(count):
        response = await send(conn, TOPIC, body)
        assert response.code in {ResponseCode.SUCCESS, *NOT_REPLICATED}, response
    return conn


def rss_mib(broker: BrokerProcess) -> float:
    assert broker.process is not None and broker.process.proc is not None
    status = Path(f"/proc/{broker.process.proc.pid}/status").read_text()
    return next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")) / 1024


async def info(broker: BrokerProcess, key: str) -> int:
    return int((await runtime_info(broker.port)).get(key, "-1"))


class FakeSlave:
    """A stranger on the HA port that behaves like a slave without storing anything: reports
    offset 0, then acknowledges the end of every frame it is sent."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.received = bytearray()
        self.closed = asyncio.Event()
        self.task = asyncio.ensure_future(self._run())

    @classmethod
    async def connect(cls, port: int) -> FakeSlave:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def _run(self) -> None:
        self.writer.write(wire.encode_offset(0))
        frames = bytearray()
        try:
            while data := await self.reader.read(1 << 20):
                self.received += data
                frames += data
                while len(frames) >= wire.HEADER_SIZE:
                    offset, size = wire.HEADER.unpack_from(frames)
                    if size < 0 or len(frames) < wire.HEADER_SIZE + size:
                        break
                    del frames[: wire.HEADER_SIZE + size]
                    self.writer.write(wire.encode_offset(offset + size))
        except ConnectionError:
            pass
        finally:
            self.closed.set()

    async def close(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        self.writer.transport.abort()


@pytest.mark.parametrize("auth", [False, True], ids=["apache-protocol", "handshake"])
async def test_a_stranger_gets_no_log_and_cannot_make_a_sync_master_acknowledge(
    cluster: Cluster, auth: bool
) -> None:
    master = await start_master(cluster, **(ACCOUNT if auth else {}))
    conn = await preload(master.port, 200, 4096)
    stranger = await FakeSlave.connect(master.port + 1)
    try:
        if auth:
            await wait_until(lambda: _has_bytes(stranger, wire.CHALLENGE_SIZE), 10)
        else:
            await wait_until(lambda: has_slaves(master.port), 10)
        codes = [(await send(conn, TOPIC, MARK + b"sync")).code for _ in range(20)]
        if not auth:
            # Apache's protocol: the stranger is sent the log and counts as a slave.
            assert MARK in stranger.received and len(stranger.received) > 200 * 4096
            assert codes == [ResponseCode.SUCCESS] * 20
            return
        assert set(codes) <= NOT_REPLICATED, codes
        async with asyncio.timeout(15):
            await stranger.closed.wait()
        # The challenge and not a byte more.
        assert bytes(stranger.received[: len(wire.MAGIC)]) == wire.MAGIC
        assert len(stranger.received) == wire.CHALLENGE_SIZE
        assert master.process is not None
        await master.process.wait_for_line(r"HA port: refused 127\.0\.0\.1:\d+: no handshake answer")
        assert await info(master, "haConnectionsRefused") == 1
        assert await info(master, "haConnectionCount") == 0
    finally:
        await stranger.close()
        conn.close()


async def test_a_slave_with_the_wrong_secret_is_refused(cluster: Cluster) -> None:
    wrong = {**ACCOUNT, "haAuthSecretKey": "not-the-secret"}
    master, slave = await start_pair(cluster, master=ACCOUNT, slave=wrong)
    assert master.process is not None and slave.process is not None
    await master.process.wait_for_line(r"HA port: refused .*wrong replication account or secret")
    await slave.process.wait_for_line(r"replication from .* stopped: HandshakeError")
    conn = await preload(master.port, 5, 1024)
    conn.close()
    assert await info(master, "haConnectionCount") == 0
    assert await info(master, "haPush2SlaveMaxOffset") == 0
    assert await info(slave, "haBytesReceived") == 0
    # Nor does the remoting port hand the secret out (GET_BROKER_CONFIG, open without ACL).
    conn = await connect("127.0.0.1", master.port, timeout=5.0)
    try:
        listing = (await call(conn, RequestCode.GET_BROKER_CONFIG)).body or b""
    finally:
        conn.close()
    assert b"haAuthAccessKey=replicator\n" in listing and b"haAuthSecretKey=******\n" in listing
    assert ACCOUNT["haAuthSecretKey"].encode() not in listing


@pytest.mark.parametrize("master_kind", ["impostor", "without-handshake"])
async def test_a_slave_takes_nothing_from_a_master_that_cannot_prove_the_account(
    cluster: Cluster, master_kind: str
) -> None:
    """An impostor answers the slave's proof with a made-up HMAC and then pushes a frame; a
    master without the handshake (Apache's) waits for an offset the slave never sends."""
    connected = asyncio.Event()

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connected.set()
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            if master_kind == "impostor":
                writer.write(wire.encode_challenge(os.urandom(wire.NONCE_SIZE)))
                _, size = wire.decode_proof_head(await reader.readexactly(wire.PROOF_HEAD_SIZE))
                await reader.readexactly(size + wire.MAC_SIZE)
                writer.write(os.urandom(wire.MAC_SIZE))
                writer.write(wire.encode_header(0, len(MARK)) + MARK)
            await reader.read()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        address = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        slave = await start_slave(cluster, haMasterAddress=address, **ACCOUNT)
        assert slave.process is not None
        why = {
            "impostor": "the master does not hold this replication account's secret",
            "without-handshake": "the master sent no handshake within 5s",
        }[master_kind]
        await slave.process.wait_for_line(f"replication from {address} stopped: HandshakeError: {why}")
        assert connected.is_set()
        assert await info(slave, "haBytesReceived") == 0
        assert await info(slave, "haReportedOffset") == -1
    finally:
        server.close()


async def test_a_slave_with_the_account_replicates_and_acknowledges(cluster: Cluster) -> None:
    master, slave = await start_pair(cluster, master=ACCOUNT, slave=ACCOUNT)
    await wait_until(lambda: has_slaves(master.port), 30)
    conn = await connect("127.0.0.1", master.port, timeout=5.0)
    try:
        codes = [(await send(conn, TOPIC, MARK + b"%d" % i)).code for i in range(20)]
    finally:
        conn.close()
    assert codes == [ResponseCode.SUCCESS] * 20
    assert await info(slave, "haBytesReceived") > 0
    assert await info(master, "haPush2SlaveMaxOffset") == await info(slave, "haReportedOffset")


def _tls(pki: dict[str, Path], **extra: Any) -> dict[str, Any]:
    return {
        "haTlsEnable": "true",
        "haTlsCertPath": pki["cert"],
        "haTlsKeyPath": pki["key"],
        "haTlsTrustCertPath": pki["ca"],
        **extra,
    }


async def _read_all(reader: asyncio.StreamReader) -> bytes:
    got = bytearray()
    with contextlib.suppress(ConnectionError, ssl.SSLError):
        async with asyncio.timeout(15):
            while data := await reader.read(65536):
                got += data
    return bytes(got)


async def test_mutual_tls_slave_replicates_and_others_get_nothing(cluster: Cluster, tmp_path: Path) -> None:
    (tmp_path / "cluster-ca").mkdir()
    (tmp_path / "other-ca").mkdir()
    pki = make_pki(tmp_path / "cluster-ca")
    other = make_pki(tmp_path / "other-ca")
    settings = _tls(pki, haTlsNeedClientAuth="true", **ACCOUNT)
    master, slave = await start_pair(cluster, master=settings, slave=settings)
    await wait_until(lambda: has_slaves(master.port), 30)
    conn = await preload(master.port, 20, 1024)
    conn.close()
    assert await info(slave, "haBytesReceived") > 20 * 1024

    # Plain text on the TLS port: an offset report answered with nothing of the log.
    reader, writer = await asyncio.open_connection("127.0.0.1", master.port + 1)
    writer.write(wire.encode_offset(0))
    plain = await _read_all(reader)
    writer.transport.abort()
    assert MARK not in plain and len(plain) < 64, plain[:64]

    # TLS with a certificate the cluster's CA did not sign: refused before any byte.
    stranger_tls = client_context(verify=False, cert_file=str(other["cert"]), key_file=str(other["key"]))
    with contextlib.suppress(ConnectionError, ssl.SSLError):
        reader, writer = await asyncio.open_connection("127.0.0.1", master.port + 1, ssl=stranger_tls)
        writer.write(wire.encode_offset(0))
        foreign = await _read_all(reader)
        writer.transport.abort()
        assert MARK not in foreign and not foreign.startswith(wire.MAGIC), foreign[:64]
    assert await info(master, "haConnectionCount") == 1


async def test_the_cap_refuses_the_connection_past_it(cluster: Cluster) -> None:
    master = await start_master(cluster, brokerRole="ASYNC_MASTER", haMaxConnections=2)
    peers = [await asyncio.open_connection("127.0.0.1", master.port + 1) for _ in range(2)]
    try:
        await wait_until(lambda: has_slaves(master.port, 2), 10)
        reader, writer = await asyncio.open_connection("127.0.0.1", master.port + 1)
        assert await _read_all(reader) == b""
        writer.transport.abort()
        assert master.process is not None
        await master.process.wait_for_line(r"HA port: refused 127\.0\.0\.1:\d+: already 2 connections")
        assert await info(master, "haConnectionsRefused") == 1
        assert await info(master, "haConnectionCount") == 2
        # A freed slot is taken again.
        peers.pop()[1].transport.abort()
        await wait_until(lambda: has_slaves(master.port, 1), 10)
        peers.append(await asyncio.open_connection("127.0.0.1", master.port + 1))
        await wait_until(lambda: has_slaves(master.port, 2), 10)
    finally:
        for _, peer in peers:
            peer.transport.abort()


def _non_reading_peer(port: int) -> socket.socket:
    sock = socket.socket()
    # The smallest receive window the kernel allows: what it would hold for the peer is not
    # the broker's memory, so keep it out of the way.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(struct.pack(">q", 0))
    return sock


async def test_a_thousand_peers_that_never_read_leave_memory_bounded(cluster: Cluster) -> None:
    """Each peer reports offset 0 (send me the whole log) and never reads. Before the guards,
    each buffered about 4 MiB in the broker (100 peers: +404 MiB; 1,000: +4 GiB)."""
    master = await start_master(cluster, brokerRole="ASYNC_MASTER", haWriteTimeout=3000)
    conn = await preload(master.port, 320, 32 * 1024)  # 10 MiB of log, all in the last file
    conn.close()
    before = peak = rss_mib(master)
    peers: list[socket.socket] = []
    sampling = True

    async def sample() -> None:
        nonlocal peak
        while sampling:
            peak = max(peak, rss_mib(master))
            await asyncio.sleep(0.05)

    sampler = asyncio.ensure_future(sample())
    try:
        loop = asyncio.get_running_loop()
        for _ in range(1000):
            peers.append(await loop.run_in_executor(None, _non_reading_peer, master.port + 1))
        # Every peer accounted for: refused at the cap (16), or let in and then dropped for
        # not reading (a slot freed by a drop is taken by a later peer while they connect).
        await wait_until(lambda: _all_turned_away(master, 1000), 60)
        assert await info(master, "haUnreadDropped") >= 16
        assert await info(master, "haConnectionCount") == 0
    finally:
        sampling = False
        await sampler
        for sock in peers:
            sock.close()
    growth = peak - before
    print(f"1,000 non-reading HA peers: RSS {before:.0f} MiB -> peak {peak:.0f} MiB (+{growth:.0f} MiB)")
    assert growth < 64, f"RSS grew {growth:.0f} MiB ({before:.0f} -> {peak:.0f})"


async def _has_bytes(peer: FakeSlave, count: int) -> bool:
    return len(peer.received) >= count


# -- the pieces, without sockets ---------------------------------------------------------------


def test_each_side_signs_its_own_role_over_both_nonces_and_the_account() -> None:
    m, n = os.urandom(wire.NONCE_SIZE), os.urandom(wire.NONCE_SIZE)
    slave = wire.sign(b"secret", wire.SLAVE, m, n, "replicator")
    assert len(slave) == wire.MAC_SIZE
    assert slave == wire.sign(b"secret", wire.SLAVE, m, n, "replicator")
    # The master's answer is not the slave's proof sent back; every input counts.
    assert slave != wire.sign(b"secret", wire.MASTER, m, n, "replicator")
    assert slave != wire.sign(b"Secret", wire.SLAVE, m, n, "replicator")
    assert slave != wire.sign(b"secret", wire.SLAVE, n, m, "replicator")
    assert slave != wire.sign(b"secret", wire.SLAVE, m, n, "replicatoR")


def test_the_handshake_bytes_round_trip_and_refuse_what_no_peer_sends() -> None:
    nonce = os.urandom(wire.NONCE_SIZE)
    challenge = wire.encode_challenge(nonce)
    assert len(challenge) == wire.CHALLENGE_SIZE and wire.decode_challenge(challenge) == nonce
    with pytest.raises(ValueError, match="no handshake challenge"):
        wire.decode_challenge(wire.encode_header(0, 0) + bytes(wire.CHALLENGE_SIZE - wire.HEADER_SIZE))
    mac = os.urandom(wire.MAC_SIZE)
    proof = wire.encode_proof(nonce, "replicator", mac)
    assert wire.decode_proof_head(proof[: wire.PROOF_HEAD_SIZE]) == (nonce, len("replicator"))
    assert proof[wire.PROOF_HEAD_SIZE :] == b"replicator" + mac
    with pytest.raises(ValueError, match="access key of 256 bytes"):
        wire.decode_proof_head(nonce + struct.pack(">H", 256))


def _security(*, slave: bool = False, **settings: Any) -> HaSecurity:
    return HaSecurity.from_config(BrokerConfig.model_validate(settings), master=not slave)


def test_the_guards_default_to_apaches_protocol_with_a_cap_and_a_bound() -> None:
    security = _security()
    assert not security.auth and security.server_ssl is None and security.client_ssl is None
    limits = (security.max_connections, security.write_buffer_limit, security.write_timeout)
    assert limits == (16, 1 << 20, 10.0)
    assert _security(**ACCOUNT).auth


def test_settings_that_cannot_work_are_refused_at_start_up(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="haAuthAccessKey and haAuthSecretKey"):
        _security(haAuthSecretKey="s")
    with pytest.raises(ConfigError, match="haTlsEnable=true on a master needs"):
        _security(haTlsEnable="true")
    # A slave without a certificate of its own is fine (it then needs no mutual TLS).
    assert _security(slave=True, haTlsEnable="true").client_ssl is not None
    with pytest.raises(ConfigError, match="haTlsNeedClientAuth=true needs haTlsTrustCertPath"):
        _security(haTlsEnable="true", haTlsNeedClientAuth="true")
    with pytest.raises(ConfigError, match="cannot load the HA port's certificates"):
        _security(
            haTlsEnable="true",
            haTlsCertPath=str(tmp_path / "none.pem"),
            haTlsKeyPath=str(tmp_path / "none.key"),
        )


async def _all_turned_away(broker: BrokerProcess, peers: int) -> bool:
    figures = await runtime_info(broker.port)
    return int(figures["haConnectionsRefused"]) + int(figures["haUnreadDropped"]) == peers
