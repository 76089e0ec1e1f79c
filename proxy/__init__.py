"""``mqproxy``: RocketMQ 5.x's proxy in cluster mode, a stateless process serving the 5.x gRPC
clients, and the 5.x remoting clients, from the brokers the name servers know, over remoting.

:mod:`.config` reads Apache's ``rmq-proxy.json``; :mod:`.cluster` answers the 5.x front's
hooks with remoting requests; :mod:`.service` is the gRPC servicer; :mod:`.auth` ACL 2.0 at the
proxy; :mod:`.remoting` the remoting port's relay; :mod:`.server` the process.
"""

from .config import ConfigError, ProxyConfig
from .server import Proxy

__all__ = ["ConfigError", "Proxy", "ProxyConfig"]
