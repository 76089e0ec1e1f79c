"""ACL credentials from the environment: the one scheme ``mqadmin``, ``mqbench``,
``mqdashboard`` and the Spark connector share.

``ROCKETMQ_ACCESS_KEY`` and ``ROCKETMQ_SECRET_KEY`` (with ``ROCKETMQ_SECURITY_TOKEN`` when the
account has one) are the names; the spellings adopters bring along are read as aliases: the
dashboard's former ``RMQ_ACCESS_KEY``/``RMQ_SECRET_KEY`` (``RMQ_SECURITY_TOKEN`` with them), and
``ROCKETMQ_CONFIG_ACCESSKEY``/``ROCKETMQ_CONFIG_SECRETKEY``, the environment form of Apache
rocketmq-dashboard's ``rocketmq.config.accessKey``/``secretKey``. The first name of each list
that is set (and not empty) wins. The SDK itself never reads the environment: a program passes
what this returns to :class:`ClientOptions`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from aiorocketmq.protocol.acl import Credentials

#: Each setting's variable, then its aliases, in the order they are looked up.
ACCESS_KEY_VARS = ("ROCKETMQ_ACCESS_KEY", "RMQ_ACCESS_KEY", "ROCKETMQ_CONFIG_ACCESSKEY")
SECRET_KEY_VARS = ("ROCKETMQ_SECRET_KEY", "RMQ_SECRET_KEY", "ROCKETMQ_CONFIG_SECRETKEY")
SECURITY_TOKEN_VARS = ("ROCKETMQ_SECURITY_TOKEN", "RMQ_SECURITY_TOKEN")


def first_set(names: tuple[str, ...], environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """The first of ``names`` set to a non-empty value, and that value."""
    env = os.environ if environ is None else environ
    for name in names:
        value = env.get(name, "").strip()
        if value:
            return name, value
    return None


def env_credentials(environ: Mapping[str, str] | None = None) -> Credentials | None:
    """The credentials the environment gives (``os.environ`` unless ``environ``), or None when
    it gives neither key. Raises :class:`ValueError` naming the variables when it gives only
    one of the two keys, or a token without them."""
    access = first_set(ACCESS_KEY_VARS, environ)
    secret = first_set(SECRET_KEY_VARS, environ)
    token = first_set(SECURITY_TOKEN_VARS, environ)
    if access is None and secret is None:
        if token is not None:
            raise ValueError(f"${token[0]} is set without ${ACCESS_KEY_VARS[0]} and ${SECRET_KEY_VARS[0]}")
        return None
    if access is None or secret is None:
        given, missing = (access, SECRET_KEY_VARS) if secret is None else (secret, ACCESS_KEY_VARS)
        assert given is not None
        raise ValueError(
            f"${given[0]} is set but not ${missing[0]}: ACL credentials need both an access key and a secret key"
        )
    return Credentials(access[1], secret[1], token[1] if token is not None else None)


def resolve_credentials(
    access_key: str | None = None, secret_key: str | None = None, environ: Mapping[str, str] | None = None
) -> Credentials | None:
    """The credentials a program signs with: each key as given, else as the environment gives
    it (:func:`env_credentials`); the environment's security token only with the environment's
    access key (a token belongs to its account). None when neither key is set anywhere; raises
    :class:`ValueError` for half a pair, naming where each half was looked for."""
    try:
        env = env_credentials(environ)
    except ValueError:
        if not (access_key and secret_key):
            raise
        env = None  # both given: the environment's half pair is not used
    ak = access_key or (env.access_key if env else None)
    sk = secret_key or (env.secret_key if env else None)
    if ak is None and sk is None:
        return None
    if ak is None or sk is None:
        raise ValueError(
            "ACL credentials need both an access key and a secret key"
            f" (given, or ${ACCESS_KEY_VARS[0]} and ${SECRET_KEY_VARS[0]})"
        )
    return Credentials(ak, sk, env.security_token if env and not access_key else None)
