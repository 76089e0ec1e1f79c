"""RocketMQ 5.3's ACL 2.0 management on the wire (request codes 3001-3010, docs/protocol.md §7).

Users and ACLs travel as JSON bodies shaped like Apache's ``UserInfo`` and ``AclInfo``; the
request headers carry only names (``username``, ``subject``, filters). These models are shared
by the broker's handlers, the admin client, ``mqadmin`` and the dashboard, so every front reads
and writes the same shapes.

Wire values (Apache 5.3.3): user types ``Super`` and ``Normal``, statuses ``enable`` and
``disable``, policy types ``Custom`` and ``Default``, decisions ``Allow`` and ``Deny``; actions
``All``, ``Any``, ``Pub``, ``Sub``, ``Create``, ``Update``, ``Delete``, ``Get``, ``List``;
resources ``Cluster:<name>``, ``Topic:<name>``, ``Group:<name>`` with ``*`` for any name and a
trailing ``*`` for a prefix; subjects ``User:<username>``.
"""

from __future__ import annotations

from pydantic import Field

from .body import Body

#: Header field of the user requests (3001-3004) and the list filter (3005).
USERNAME = "username"
USER_FILTER = "filter"
#: Header fields of the ACL requests (3006-3010).
SUBJECT = "subject"
POLICY_TYPE = "policyType"
RESOURCE = "resource"
SUBJECT_FILTER = "subjectFilter"
RESOURCE_FILTER = "resourceFilter"

USER_SUBJECT_PREFIX = "User:"


class UserInfo(Body):
    """One account (Apache ``UserInfo``): the password is sent only to create or change it."""

    username: str | None = None
    password: str | None = None
    #: ``Super`` or ``Normal``.
    user_type: str | None = Field(None, alias="userType")
    #: ``enable`` or ``disable``.
    user_status: str | None = Field(None, alias="userStatus")


class PolicyEntryInfo(Body):
    """One rule: a resource, the actions on it, where from, and allow or deny."""

    resource: str | None = None
    actions: list[str] | None = None
    source_ips: list[str] | None = Field(None, alias="sourceIps")
    #: ``Allow`` or ``Deny``.
    decision: str | None = None


class PolicyInfo(Body):
    #: ``Custom`` (set by an administrator) or ``Default``.
    policy_type: str | None = Field(None, alias="policyType")
    entries: list[PolicyEntryInfo] | None = None


class AclInfo(Body):
    """A subject's policies (Apache ``AclInfo``)."""

    subject: str | None = None
    policies: list[PolicyInfo] | None = None


def user_subject(username: str) -> str:
    """The subject naming a user in an ACL: ``User:<username>``."""
    return f"{USER_SUBJECT_PREFIX}{username}"
