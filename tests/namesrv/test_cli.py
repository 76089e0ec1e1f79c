"""``python -m aiorocketmq.namesrv`` options: config file, overrides, ``-p``, and refusing bad settings."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

from tests.support import ROOT


def namesrv(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aiorocketmq.namesrv", *args],
        capture_output=True,
        text=True,
        timeout=30,
        cwd=ROOT,
        check=False,
    )


def test_print_config_merges_defaults_file_and_options(tmp_path: Path) -> None:
    conf = tmp_path / "namesrv.properties"
    conf.write_text(
        "# operator's file\nlistenPort = 9877\norderMessageEnable=true\nscanNotActiveBrokerInterval=5000\n"
    )
    result = namesrv("-c", str(conf), "--store-dir", str(tmp_path / "data"), "-p")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "listenPort=9877",
        "bindAddress=0.0.0.0",
        f"storePathRootDir={tmp_path / 'data'}",
        f"kvConfigPath={tmp_path / 'data' / 'kvConfig.json'}",
        "orderMessageEnable=true",
        "brokerChannelExpiredTime=120000",
        "scanNotActiveBrokerInterval=5000",
        "enableTopicList=true",
        "authenticationEnabled=false",
        f"authUsersFile={tmp_path / 'data' / 'namesrv_users.yml'}",
        "serverSocketBacklog=1024",
        "serverFrameMaxBytes=16777216",
        "serverBufferedFrameBytesMax=268435456",
        "serverFrameReadTimeoutMillis=60000",
        "serverMaxConnectionsPerAddress=1000",
    ]
    overridden = namesrv("-c", str(conf), "--listen-port", "9999", "-p")
    assert "listenPort=9999" in overridden.stdout.splitlines()
    assert f"kvConfigPath={Path.home() / 'namesrv' / 'kvConfig.json'}" in overridden.stdout.splitlines()


def test_explicit_kv_config_path_wins(tmp_path: Path) -> None:
    conf = tmp_path / "namesrv.properties"
    conf.write_text(f"kvConfigPath={tmp_path / 'elsewhere.json'}\n")
    result = namesrv("-c", str(conf), "--store-dir", str(tmp_path / "data"), "-p")
    assert f"kvConfigPath={tmp_path / 'elsewhere.json'}" in result.stdout.splitlines()


def test_bad_settings_are_refused_with_the_reason(tmp_path: Path) -> None:
    conf = tmp_path / "namesrv.properties"
    conf.write_text("listenPort=abc\n")
    result = namesrv("-c", str(conf), "-p")
    assert result.returncode == 2
    assert "listenPort" in result.stderr and "abc" in result.stderr
    missing = namesrv("-c", str(tmp_path / "nope.properties"))
    assert missing.returncode == 2
    assert "cannot read config file" in missing.stderr
    negative = namesrv("--listen-port", "-5", "-p")
    assert negative.returncode == 2 and "listenPort" in negative.stderr


def test_port_in_use_exits_with_an_error(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = namesrv(
            "--bind-address", "127.0.0.1", "--listen-port", str(port), "--store-dir", str(tmp_path)
        )
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
