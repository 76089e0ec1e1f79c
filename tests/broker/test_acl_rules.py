"""The ACL's pure parts: request signing (docs/protocol.md §7.5), address patterns, the
plain_acl.yml files (merging, reloading, editing) and the validator's decisions per request."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiorocketmq.broker.acl import (
    AccessValidator,
    AclConfigError,
    AclDeniedError,
    Perm,
    acl_files,
    address_matcher,
    delete_account,
    needed_resources,
    parse_perm,
    permitted,
    update_account,
    update_global_white,
)
from aiorocketmq.protocol.acl import Credentials, sign, signature, signing_content, verify
from aiorocketmq.protocol.body import ConsumerData, HeartbeatData, SubscriptionData
from aiorocketmq.protocol.codes import RequestCode, ResponseCode, SerializeType
from aiorocketmq.protocol.command import FrameDecoder, RemotingCommand

# docs/protocol.md §7.5: SEND_MESSAGE_V2 from a Java 4.9.8 producer, and the same from the C++ client.
JAVA_FIELDS = {
    "AccessKey": "RocketMQ",
    "a": "please_rename_unique_group_name",
    "b": "TopicTest",
    "c": "TBW102",
    "d": 4,
    "e": 0,
    "f": 0,
    "g": 1700000000000,
    "h": 0,
    "i": "WAIT\x01true\x02TAGS\x01TagA\x02",
    "j": 0,
    "k": False,
    "m": False,
    "n": "broker-a",
}
BODY = b"Hello RocketMQ"


def test_signature_matches_the_java_client() -> None:
    content = signing_content(JAVA_FIELDS, BODY)
    assert len(content) == 124
    assert signature("12345678", content) == "fF1yuuGpatwxBwMJ6VRCpqerz18="


@given(
    secret=st.text(min_size=1, max_size=100), content=st.binary(max_size=300), body=st.binary(max_size=300)
)
def test_signature_is_hmac_sha1_for_any_key_length(secret: str, content: bytes, body: bytes) -> None:
    """The hand-built HMAC (pads hashed once per secret) is the standard one, keys longer than
    SHA-1's block included, with the body hashed apart from the fields."""
    expected = hmac.new(secret.encode("utf-8"), content + body, hashlib.sha1).digest()
    assert signature(secret, content, body) == base64.b64encode(expected).decode("ascii")


def test_signature_matches_the_cpp_client_with_its_channel_field() -> None:
    fields = {k: v for k, v in JAVA_FIELDS.items() if k != "n"} | {"l": 0, "OnsChannel": "ALIYUN"}
    assert signature("12345678", signing_content(fields, BODY)) == "BQazbanAtdVIBcAOEWWhPp4O8/g="


def test_sign_then_verify_as_the_broker_receives_it() -> None:
    cmd = RemotingCommand.request(
        RequestCode.SEND_MESSAGE_V2, {k: v for k, v in JAVA_FIELDS.items() if k != "AccessKey"}, BODY
    )
    sign(cmd, Credentials("RocketMQ", "12345678"))
    assert cmd.ext_fields["Signature"] == "fF1yuuGpatwxBwMJ6VRCpqerz18="
    assert verify(cmd.ext_fields, BODY, "12345678")
    assert not verify(cmd.ext_fields, BODY, "wrong-secret")
    assert not verify(cmd.ext_fields, BODY + b"!", "12345678")
    # the flag old Java clients add after signing does not break verification
    assert verify(cmd.ext_fields | {"_UNIQUE_KEY_QUERY": "false"}, BODY, "12345678")
    assert not verify(cmd.ext_fields | {"b": "OtherTopic"}, BODY, "12345678")


@pytest.mark.parametrize("serialize_type", list(SerializeType))
def test_native_values_keep_their_types_and_verify_in_every_encoding(serialize_type: SerializeType) -> None:
    fields = {"a": "pg", "b": "TopicTest", "d": 4, "e": 0, "g": 1700000000000, "k": False, "m": True}
    cmd = RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, fields, BODY, serialize_type=serialize_type)
    sign(cmd, Credentials("RocketMQ", "12345678"))
    assert cmd.ext_fields["d"] == 4 and cmd.ext_fields["k"] is False  # a msgpack header stays native
    (received,) = FrameDecoder().feed(cmd.encode())
    assert verify(received.ext_fields, received.body, "12345678")
    assert not verify(received.ext_fields, received.body, "wrong-secret")


def test_credentials_keep_the_secret_out_of_repr() -> None:
    assert "12345678" not in repr(Credentials("RocketMQ", "12345678"))
    with pytest.raises(ValueError):
        Credentials("RocketMQ", "")


@pytest.mark.parametrize(
    ("pattern", "yes", "no"),
    [
        ("", [], ["127.0.0.1"]),
        ("*", ["10.1.2.3", "::1"], []),
        ("*.*.*.*", ["10.1.2.3"], []),
        ("192.168.0.{1,2,3}", ["192.168.0.2"], ["192.168.0.4", "192.168.1.2"]),
        ("10.0.0.1,10.0.0.9", ["10.0.0.9"], ["10.0.0.2"]),
        ("192.168.*.*", ["192.168.44.7"], ["192.169.0.1"]),
        ("192.168.1.1-100", ["192.168.1.100", "192.168.1.1"], ["192.168.1.101", "192.168.2.5"]),
        ("127.0.0.1", ["127.0.0.1"], ["127.0.0.2"]),
        ("::1", ["::1", "0:0:0:0:0:0:0:1"], ["::2", "127.0.0.1"]),
    ],
)
def test_address_patterns(pattern: str, yes: list[str], no: list[str]) -> None:
    match = address_matcher(pattern)
    assert all(match(ip) for ip in yes)
    assert not any(match(ip) for ip in no)


def test_permissions() -> None:
    assert parse_perm("PUB|SUB") == parse_perm("SUB|PUB") == Perm.PUB | Perm.SUB
    assert parse_perm("nonsense") == parse_perm(None) == Perm.DENY
    assert permitted(Perm.PUB, Perm.PUB | Perm.SUB)
    assert not permitted(Perm.PUB, Perm.SUB)
    assert not permitted(Perm.SUB, Perm.DENY | Perm.SUB)
    assert permitted(Perm.ANY, Perm.SUB) and not permitted(Perm.ANY, Perm.DENY)


def test_needed_resources_per_request_code() -> None:
    assert needed_resources(RequestCode.SEND_MESSAGE_V2, {"a": "pg", "b": "T"}, b"") == {"T": Perm.PUB}
    assert needed_resources(RequestCode.SEND_MESSAGE_V2, {"a": "cg", "b": "%RETRY%cg"}, b"") == {
        "%RETRY%cg": Perm.SUB
    }
    assert needed_resources(RequestCode.PULL_MESSAGE, {"topic": "T", "consumerGroup": "cg"}, None) == {
        "T": Perm.SUB,
        "%RETRY%cg": Perm.SUB,
    }
    assert needed_resources(
        RequestCode.UPDATE_CONSUMER_OFFSET, {"topic": "T", "consumerGroup": "cg"}, None
    ) == {
        "T": Perm.SUB,
        "%RETRY%cg": Perm.SUB,
    }
    heartbeat = HeartbeatData(
        client_id="c",
        consumer_data_set=[
            ConsumerData(
                group_name="cg",
                subscription_data_set=[SubscriptionData(topic="T"), SubscriptionData(topic="%RETRY%cg")],
            )
        ],
    )
    assert needed_resources(RequestCode.HEART_BEAT, {}, heartbeat.encode()) == {
        "%RETRY%cg": Perm.SUB,
        "T": Perm.SUB,
    }
    assert needed_resources(RequestCode.HEART_BEAT, {}, b"{not json") == {}
    assert needed_resources(RequestCode.END_TRANSACTION, {"producerGroup": "pg"}, None) == {}


SAMPLE = """\
globalWhiteRemoteAddresses:
  - 10.10.103.*
accounts:
  - accessKey: RocketMQ
    secretKey: "12345678"
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - TopicTest=PUB|SUB
      - topicC=SUB
    groupPerms:
      - groupA=DENY
  - accessKey: rocketmq2
    secretKey: "12345678"
    whiteRemoteAddress: 192.168.1.*
    admin: true
"""


def home_with(tmp_path: Path, text: str = SAMPLE) -> Path:
    conf = tmp_path / "conf"
    conf.mkdir(exist_ok=True)
    (conf / "plain_acl.yml").write_text(text)
    return tmp_path


def signed(
    code: int, fields: dict[str, object], body: bytes, ak: str = "RocketMQ", sk: str = "12345678"
) -> dict[str, object]:
    cmd = RemotingCommand.request(code, dict(fields), body)
    sign(cmd, Credentials(ak, sk))
    return cmd.ext_fields


def denial(
    validator: AccessValidator,
    code: int,
    fields: dict[str, object],
    body: bytes = b"",
    addr: str = "127.0.0.1:4000",
) -> str:
    with pytest.raises(AclDeniedError) as info:
        validator.check(code, fields, body, addr)
    assert info.value.code == ResponseCode.SYSTEM_ERROR
    return str(info.value)


def test_validator_decisions(tmp_path: Path) -> None:
    validator = AccessValidator(acl_files(home_with(tmp_path)))
    send = {"a": "pg", "b": "TopicTest"}
    validator.check(
        RequestCode.SEND_MESSAGE_V2, signed(RequestCode.SEND_MESSAGE_V2, send, BODY), BODY, "127.0.0.1:4000"
    )
    assert "No accessKey is configured" in denial(validator, RequestCode.SEND_MESSAGE_V2, send, BODY)
    assert "No acl config for stranger" in denial(
        validator,
        RequestCode.SEND_MESSAGE_V2,
        signed(RequestCode.SEND_MESSAGE_V2, send, BODY, ak="stranger"),
        BODY,
    )
    assert "Check signature failed for accessKey=RocketMQ" in denial(
        validator,
        RequestCode.SEND_MESSAGE_V2,
        signed(RequestCode.SEND_MESSAGE_V2, send, BODY, sk="wrong-one"),
        BODY,
    )
    other = {"a": "pg", "b": "topicA"}
    remark = denial(
        validator, RequestCode.SEND_MESSAGE_V2, signed(RequestCode.SEND_MESSAGE_V2, other, BODY), BODY
    )
    assert (
        "No permission for topic=topicA: accessKey=RocketMQ holds DENY, request code 310 needs PUB" in remark
    )
    # unlisted topics fall to defaultTopicPerm (DENY); groups to defaultGroupPerm (SUB)
    pull = {"topic": "TopicTest", "consumerGroup": "groupA"}
    assert "group=groupA" in denial(
        validator, RequestCode.PULL_MESSAGE, signed(RequestCode.PULL_MESSAGE, pull, b"")
    )
    pull["consumerGroup"] = "anyGroup"
    validator.check(RequestCode.PULL_MESSAGE, signed(RequestCode.PULL_MESSAGE, pull, b""), b"", "127.0.0.1:1")
    # admin-only codes need an admin account
    create = {"topic": "TopicTest"}
    assert "not an admin account" in denial(
        validator,
        RequestCode.UPDATE_AND_CREATE_TOPIC,
        signed(RequestCode.UPDATE_AND_CREATE_TOPIC, create, b""),
    )
    admin = signed(RequestCode.UPDATE_AND_CREATE_TOPIC, create, b"", ak="rocketmq2")
    validator.check(RequestCode.UPDATE_AND_CREATE_TOPIC, admin, b"", "127.0.0.1:1")
    # so do their RocketMQ 5 forms: topics and groups in bulk, static topics
    for code in (
        RequestCode.UPDATE_AND_CREATE_TOPIC_LIST,
        RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP_LIST,
        RequestCode.UPDATE_AND_CREATE_STATIC_TOPIC,
        RequestCode.UPDATE_COLD_DATA_FLOW_CTR_CONFIG,
        RequestCode.REMOVE_COLD_DATA_FLOW_CTR_CONFIG,
        RequestCode.SET_COMMITLOG_READ_MODE,
    ):
        assert "not an admin account" in denial(validator, code, signed(code, create, b"")), code
        validator.check(code, signed(code, create, b"", ak="rocketmq2"), b"", "127.0.0.1:1")
    # trace messages pass for any signed account
    trace = signed(RequestCode.SEND_MESSAGE_V2, {"a": "pg", "b": "RMQ_SYS_TRACE_TOPIC"}, BODY)
    validator.check(RequestCode.SEND_MESSAGE_V2, trace, BODY, "127.0.0.1:1")
    # white lists skip signature and permissions: the global one even without an AccessKey
    validator.check(RequestCode.UPDATE_AND_CREATE_TOPIC, {}, b"", "10.10.103.7:5000")
    validator.check(
        RequestCode.SEND_MESSAGE_V2, {"AccessKey": "rocketmq2", "b": "x"}, b"", "192.168.1.9:5000"
    )
    assert "Check signature failed" in denial(
        validator, RequestCode.SEND_MESSAGE_V2, {"AccessKey": "rocketmq2", "b": "x"}
    )


def test_files_merge_first_definition_wins(tmp_path: Path) -> None:
    home = home_with(tmp_path)
    extra = home / "conf" / "acl" / "team"
    extra.mkdir(parents=True)
    (extra / "b.yaml").write_text(
        "accounts:\n  - {accessKey: RocketMQ, secretKey: other-secret, admin: true}\n"
    )
    (extra / "c.yml").write_text(
        "accounts:\n  - {accessKey: teamkey1, secretKey: teamsecret, defaultTopicPerm: PUB}\n"
    )
    (extra / "ignored.txt").write_text("accounts: [")
    files = acl_files(home)
    assert [p.name for p in files] == ["plain_acl.yml", "b.yaml", "c.yml"]
    validator = AccessValidator(files)
    assert validator.config.accounts["RocketMQ"].secret_key == "12345678"
    assert validator.config.accounts["teamkey1"].default_topic_perm == Perm.PUB
    assert acl_files(home, configured=tmp_path / "mine.yml") == [tmp_path / "mine.yml"]


def test_malformed_files_are_refused_with_the_file_named(tmp_path: Path) -> None:
    home = home_with(
        tmp_path, "accounts:\n  - {accessKey: k1234567, secretKey: s1234567, topicPerms: [topicA]}\n"
    )
    with pytest.raises(
        AclConfigError, match=r"plain_acl.yml: account k1234567: topicPerms entry 'topicA' is not name=PERM"
    ):
        AccessValidator(acl_files(home))


def test_edits_take_effect_and_a_bad_edit_keeps_the_rules(tmp_path: Path) -> None:
    home = home_with(tmp_path)
    path = home / "conf" / "plain_acl.yml"
    validator = AccessValidator(acl_files(home), reload_interval=0)
    fields = signed(RequestCode.SEND_MESSAGE_V2, {"a": "pg", "b": "topicA"}, BODY)
    denial(validator, RequestCode.SEND_MESSAGE_V2, fields, BODY)
    path.write_text(SAMPLE.replace("topicA=DENY", "topicA=PUB"))
    os.utime(path, ns=(1, 1))  # a new stamp even within the file system's time granularity
    validator.check(RequestCode.SEND_MESSAGE_V2, fields, BODY, "127.0.0.1:1")
    path.write_text("accounts: [ {accessKey: x")  # broken YAML: the rules in force stay
    validator.check(RequestCode.SEND_MESSAGE_V2, fields, BODY, "127.0.0.1:1")


def test_admin_edits_rewrite_the_file(tmp_path: Path) -> None:
    home = home_with(tmp_path)
    validator = AccessValidator(acl_files(home), reload_interval=0)
    with pytest.raises(AclConfigError, match="longer than 6"):
        update_account(validator, {"accessKey": "short", "secretKey": "12345678"})
    update_account(
        validator,
        {
            "accessKey": "newuser1",
            "secretKey": "newsecret",
            "defaultTopicPerm": "SUB",
            "topicPerms": ["Orders=PUB"],
            "groupPerms": ["g1=SUB"],
        },
    )
    account = validator.config.accounts["newuser1"]
    assert (account.owned("Orders"), account.owned("Other"), account.owned("%RETRY%g1")) == (
        Perm.PUB,
        Perm.SUB,
        Perm.SUB,
    )
    text = (home / "conf" / "plain_acl.yml").read_text()
    assert "newuser1" in text and "dataVersion" in text and "RocketMQ" in text
    fields = signed(
        RequestCode.SEND_MESSAGE_V2, {"a": "pg", "b": "Orders"}, BODY, ak="newuser1", sk="newsecret"
    )
    validator.check(RequestCode.SEND_MESSAGE_V2, fields, BODY, "127.0.0.1:1")
    assert delete_account(validator, "newuser1") and "newuser1" not in validator.config.accounts
    assert not delete_account(validator, "newuser1")
    update_global_white(validator, ["127.0.0.*"])
    validator.check(RequestCode.UPDATE_AND_CREATE_TOPIC, {}, b"", "127.0.0.1:1")
    with pytest.raises(ValueError):
        update_global_white(validator, ["1.2.3"])
