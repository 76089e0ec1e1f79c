"""One environment scheme for ACL credentials (``client/credentials.py``), pure code: the
function itself, and the tools, the dashboard and the Spark options reading through it."""

from __future__ import annotations

import pytest

from aiorocketmq.client.credentials import (
    ACCESS_KEY_VARS,
    SECRET_KEY_VARS,
    SECURITY_TOKEN_VARS,
    env_credentials,
)
from aiorocketmq.protocol.acl import Credentials
from aiorocketmq.tools.cli import CommandFailed, tool_credentials

ALL_VARS = (*ACCESS_KEY_VARS, *SECRET_KEY_VARS, *SECURITY_TOKEN_VARS, "ROCKETMQ_HOME")


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """The environment without any credential variable of the developer's shell."""
    for name in ALL_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_the_scheme_and_its_aliases() -> None:
    assert env_credentials({}) is None
    assert env_credentials({"ROCKETMQ_ACCESS_KEY": "ak", "ROCKETMQ_SECRET_KEY": "sk"}) == Credentials(
        "ak", "sk"
    )
    assert env_credentials(
        {"ROCKETMQ_ACCESS_KEY": "ak", "ROCKETMQ_SECRET_KEY": "sk", "ROCKETMQ_SECURITY_TOKEN": "tok"}
    ) == Credentials("ak", "sk", "tok")
    # The dashboard's former names and Apache rocketmq-dashboard's, as aliases.
    assert env_credentials(
        {"RMQ_ACCESS_KEY": "ak", "RMQ_SECRET_KEY": "sk", "RMQ_SECURITY_TOKEN": "tok"}
    ) == Credentials("ak", "sk", "tok")
    assert env_credentials(
        {"ROCKETMQ_CONFIG_ACCESSKEY": "ak", "ROCKETMQ_CONFIG_SECRETKEY": "sk"}
    ) == Credentials("ak", "sk")
    # The scheme's name wins over an alias; empty or blank values count as unset.
    both = {
        "ROCKETMQ_ACCESS_KEY": "new",
        "RMQ_ACCESS_KEY": "old",
        "ROCKETMQ_SECRET_KEY": " ",
        "RMQ_SECRET_KEY": "old_secret",
    }
    assert env_credentials(both) == Credentials("new", "old_secret")


def test_half_a_pair_names_what_is_missing() -> None:
    with pytest.raises(ValueError, match=r"\$RMQ_ACCESS_KEY is set but not \$ROCKETMQ_SECRET_KEY"):
        env_credentials({"RMQ_ACCESS_KEY": "ak"})
    with pytest.raises(ValueError, match=r"\$ROCKETMQ_SECRET_KEY is set but not \$ROCKETMQ_ACCESS_KEY"):
        env_credentials({"ROCKETMQ_SECRET_KEY": "sk"})
    with pytest.raises(ValueError, match=r"\$ROCKETMQ_SECURITY_TOKEN is set without"):
        env_credentials({"ROCKETMQ_SECURITY_TOKEN": "tok"})


def test_secrets_stay_out_of_reprs() -> None:
    found = env_credentials({"ROCKETMQ_ACCESS_KEY": "ak", "ROCKETMQ_SECRET_KEY": "hush"})
    assert found is not None and "hush" not in repr(found)


def test_tools_read_the_scheme(clean_env: pytest.MonkeyPatch) -> None:
    assert tool_credentials() is None
    clean_env.setenv("RMQ_ACCESS_KEY", "ak")
    with pytest.raises(CommandFailed, match="RMQ_ACCESS_KEY is set but not"):
        tool_credentials()
    # mqbench's -ak/-sk, given both, stand on their own.
    assert tool_credentials("cli_ak", "cli_sk") == Credentials("cli_ak", "cli_sk")
    clean_env.setenv("RMQ_SECRET_KEY", "sk")
    clean_env.setenv("ROCKETMQ_SECURITY_TOKEN", "tok")
    assert tool_credentials() == Credentials("ak", "sk", "tok")
    # A key given on the command line replaces the environment's, and the token that goes with it.
    assert tool_credentials("cli_ak", None) == Credentials("cli_ak", "sk")


def test_dashboard_reads_the_scheme(clean_env: pytest.MonkeyPatch) -> None:
    from aiorocketmq.dashboard.cli import parse_args

    clean_env.setenv("RMQ_ACCESS_KEY", "old_ak")
    clean_env.setenv("RMQ_SECRET_KEY", "old_sk")
    args = parse_args(["-n", "127.0.0.1:9876"])
    assert (args.access_key, args.secret_key) == ("old_ak", "old_sk")
    clean_env.setenv("ROCKETMQ_ACCESS_KEY", "ak")
    clean_env.setenv("ROCKETMQ_SECRET_KEY", "sk")
    args = parse_args(["-n", "127.0.0.1:9876"])
    assert (args.access_key, args.secret_key) == ("ak", "sk")
    args = parse_args(["-n", "127.0.0.1:9876", "--access-key", "flag_ak", "--secret-key", "flag_sk"])
    assert (args.access_key, args.secret_key) == ("flag_ak", "flag_sk")
    # Key by key, as the tools: a flag replaces only its own half; the token goes with the
    # environment's access key.
    clean_env.setenv("ROCKETMQ_SECURITY_TOKEN", "tok")
    args = parse_args(["-n", "127.0.0.1:9876"])
    assert (args.access_key, args.secret_key, args.security_token) == ("ak", "sk", "tok")
    args = parse_args(["-n", "127.0.0.1:9876", "--access-key", "flag_ak"])
    assert (args.access_key, args.secret_key, args.security_token) == ("flag_ak", "sk", None)


def test_dashboard_refuses_half_a_pair(
    clean_env: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from aiorocketmq.dashboard.cli import parse_args

    with pytest.raises(SystemExit) as exited:
        parse_args(["-n", "127.0.0.1:9876", "--access-key", "flag_ak"])
    assert exited.value.code == 2
    assert "need both an access key and a secret key" in capsys.readouterr().err


def test_spark_options_read_the_scheme(clean_env: pytest.MonkeyPatch) -> None:
    from aiorocketmq.pipeline.options import RocketMQOptionError, Security

    assert Security.parse({}).access_key is None
    clean_env.setenv("ROCKETMQ_ACCESS_KEY", "ak")
    with pytest.raises(RocketMQOptionError, match="ROCKETMQ_ACCESS_KEY is set but not"):
        Security.parse({})
    clean_env.setenv("ROCKETMQ_SECRET_KEY", "sk")
    options = Security.parse({}).client_options()
    assert (options.access_key, options.secret_key) == ("ak", "sk")
    given = Security.parse({"accesskey": "opt_ak", "secretkey": "opt_sk"})
    assert (given.access_key, given.secret_key) == ("opt_ak", "opt_sk")
    clean_env.setenv("ROCKETMQ_SECURITY_TOKEN", "tok")
    assert Security.parse({}).client_options().security_token == "tok"
    assert Security.parse({"accesskey": "opt_ak"}).client_options().security_token is None
    assert Security.parse({"securitytoken": "opt_tok"}).client_options().security_token == "opt_tok"
    clean_env.delenv("ROCKETMQ_ACCESS_KEY")
    clean_env.delenv("ROCKETMQ_SECRET_KEY")
    clean_env.delenv("ROCKETMQ_SECURITY_TOKEN")
    with pytest.raises(RocketMQOptionError, match="securityToken"):
        Security.parse({"securitytoken": "opt_tok"})
    with pytest.raises(RocketMQOptionError, match="secretKey"):
        Security.parse({"accesskey": "opt_ak"})
