"""ACL 2.0, RocketMQ 5.3's authentication and authorization, in the broker (docs/security.md).

* :mod:`.model`: users, resources, policies and the decision (pure);
* :mod:`.requests`: which resources and actions each request code asks for (the table);
* :mod:`.store`: the users and ACLs, durable in a JSON file under ``authConfigPath``;
* :mod:`.engine`: the checks every request passes on the remoting and gRPC fronts;
* :mod:`.admin`: the management requests 3001-3010;
* :mod:`.migrate`: ACL 1.0 accounts turned into users and ACLs.

Other parts of the broker that send requests of their own sign them with
:func:`inner_credentials` (``innerClientAuthenticationCredentials``).
"""

from .engine import AuthEngine, AuthRefused, auth_config_path, inner_credentials

__all__ = ["AuthEngine", "AuthRefused", "auth_config_path", "inner_credentials"]
