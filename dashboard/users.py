"""Optional login: the users file (rocketmq-dashboard's ``users.properties`` format) and the
signed session cookie.

The file has one ``user=password[,1]`` a line (``1`` marks an admin; ``#`` starts a comment).
Admins may change the cluster; other users only look. The session cookie carries the user name
and an expiry, signed with HMAC-SHA256 under a key made when the process starts, so sessions
end when the dashboard restarts and cannot be forged without that key.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import os
import secrets
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from aiorocketmq.protocol.settings import read_properties

SESSION_SECONDS = 12 * 3600


@dataclass(frozen=True)
class User:
    name: str
    password: str
    admin: bool


class UsersFileError(ValueError):
    pass


def parse_users(text: str) -> dict[str, User]:
    """Users by name from a users file's text."""
    users: dict[str, User] = {}
    for name, value in read_properties(text).items():
        password, _, flag = value.partition(",")
        if not password:
            raise UsersFileError(f"user {name!r} has no password")
        if flag.strip() not in ("", "0", "1"):
            raise UsersFileError(f"user {name!r}: the role after the comma must be 0 or 1, not {flag!r}")
        users[name] = User(name, password, flag.strip() == "1")
    return users


def load_users(path: Path) -> dict[str, User]:
    users = parse_users(path.read_text(encoding="utf-8"))
    if not users:
        raise UsersFileError(f"{path} names no user")
    return users


def create_users_file(path: Path, name: str = "admin") -> bool:
    """Make ``path`` a users file with one admin, ``name``, and a random password, readable by
    its owner only; ``False`` (and nothing written) when the file exists already. For a
    dashboard that must serve beyond loopback from its first start (a container's)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(
            f"# made by mqdashboard --init-users: user=password[,1], 1 = admin\n{name}={secrets.token_urlsafe(18)},1\n"
        )
    return True


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is a loopback one: only this machine can connect.
    Every interface (``0.0.0.0``, ``::``, empty) and names that do not resolve are not."""
    if not host:
        return False
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


class Sessions:
    """Issues and checks session tokens for the users of one users file."""

    def __init__(self, users: dict[str, User], key: bytes | None = None) -> None:
        self.users = users
        self._key = key or secrets.token_bytes(32)

    def login(self, name: str, password: str) -> User | None:
        user = self.users.get(name)
        if user is None or not hmac.compare_digest(user.password.encode(), password.encode()):
            return None
        return user

    def _sign(self, payload: bytes) -> str:
        return hmac.new(self._key, payload, hashlib.sha256).hexdigest()

    def token(self, user: User, now: float | None = None) -> str:
        expires = int((time.time() if now is None else now) + SESSION_SECONDS)
        payload = base64.urlsafe_b64encode(f"{user.name}\n{expires}".encode())
        return f"{payload.decode()}.{self._sign(payload)}"

    def user_of(self, token: str | None, now: float | None = None) -> User | None:
        """The user a token names, if it is genuine, unexpired and the user still exists."""
        if not token or "." not in token:
            return None
        payload, signature = token.rsplit(".", 1)
        if not hmac.compare_digest(self._sign(payload.encode()), signature):
            return None
        try:
            name, expires = base64.urlsafe_b64decode(payload).decode().rsplit("\n", 1)
            if int(expires) < (time.time() if now is None else now):
                return None
        except ValueError:
            return None
        return self.users.get(name)


#: Failed logins, from one client address or for one user name, before logins from it (or for
#: it) are refused for a while; and the first such while, which doubles with each lockout up
#: to :data:`LOCKOUT_MAX` (a wrong guess a second is then about 1,000 guesses a day at most).
LOGIN_FAILURES = 5
LOCKOUT_SECONDS = 30.0
LOCKOUT_MAX = 900.0


@dataclass
class _Failures:
    count: int = 0
    lockouts: int = 0
    until: float = 0.0


class LoginThrottle:
    """Slows password guessing: after :data:`LOGIN_FAILURES` wrong passwords in a row from one
    client address, or for one user name (a guesser spreading over addresses), logins from that
    address or for that name are refused until the lockout ends, whatever the password; a right
    password once allowed clears both counts. Kept in memory, per dashboard process."""

    def __init__(self, failures: int = LOGIN_FAILURES, lockout: float = LOCKOUT_SECONDS) -> None:
        self.failures = failures
        self.lockout = lockout
        self._by_key: dict[str, _Failures] = {}

    def _keys(self, client: str, name: str) -> tuple[str, str]:
        return f"addr:{client}", f"user:{name}"

    def locked_for(self, client: str, name: str, now: float | None = None) -> float:
        """Seconds until a login from ``client`` for ``name`` is heard again (0: now)."""
        at = time.monotonic() if now is None else now
        records = [self._by_key.get(key) for key in self._keys(client, name)]
        return max([0.0] + [r.until - at for r in records if r is not None])

    def failed(self, client: str, name: str, now: float | None = None) -> None:
        at = time.monotonic() if now is None else now
        for key in self._keys(client, name):
            record = self._by_key.setdefault(key, _Failures())
            record.count += 1
            if record.count >= self.failures:
                record.until = at + min(self.lockout * 2**record.lockouts, LOCKOUT_MAX)
                record.lockouts += 1
                record.count = 0
        if len(self._by_key) > 10_000:  # a flood of made-up names: forget the ones not locked
            self._by_key = {k: f for k, f in self._by_key.items() if f.until > at}

    def succeeded(self, client: str, name: str) -> None:
        for key in self._keys(client, name):
            self._by_key.pop(key, None)
