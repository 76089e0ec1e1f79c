"""``mqproxy``: RocketMQ 5.x's proxy in cluster mode, a stateless process serving the 5.x gRPC
clients from the brokers the name servers know (ours, Apache 4.9's and 5.x's) over remoting.

:mod:`.config` reads Apache's ``rmq-proxy.json``; :mod:`.cluster` answers the 5.x front's
hooks with remoting requests; :mod:`.service` is the servicer; :mod:`.server` the process.
"""

from .config import ConfigError, ProxyConfig
from .server import Proxy

__all__ = ["ConfigError", "Proxy", "ProxyConfig"]
