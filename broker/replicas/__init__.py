"""Controller mode on the broker: RocketMQ 5's ``ReplicasManager`` (docs/controller.md).

With ``enableControllerMode=true`` the broker does not take its role from ``brokerRole``: it
starts as a fenced slave, finds the controller leader (CONTROLLER_GET_METADATA_INFO on each
``controllerAddr``), gets its broker id (kept in ``<storePathRootDir>/brokerIdentity``; the
first time GET_NEXT_BROKER_ID, then APPLY_BROKER_ID with the id written to the ``-temp`` file
first), registers (CONTROLLER_REGISTER_BROKER) and learns the group's master. With no master,
it asks for an election (CONTROLLER_ELECT_MASTER). Then it becomes master or slave, and
changes role whenever the controller says so (NOTIFY_BROKER_ROLE_CHANGED) or whenever its
periodic look at the group (CONTROLLER_GET_REPLICA_INFO) shows a newer master epoch.

Meanwhile it heartbeats to every controller (BROKER_HEARTBEAT, one-way, with its last epoch,
commit-log end, confirm offset and election priority); as master it reports SyncStateSet
changes (CONTROLLER_ALTER_SYNC_STATE_SET) when the replication proposes a larger set and when
a periodic check finds members fallen behind.

The replication itself (epochs, truncation, the HA port and links) is the auto-switch layer
(:mod:`aiorocketmq.broker.ha.autoswitch`); what the rest of the broker does on a role change
(taking writes, delayed delivery, registering with the name servers) is the ``RoleSwitch``
this manager is given.

The parts: :mod:`.manager` (the sequence, elections, role changes, the SyncStateSet),
:mod:`.controllers` (finding the leader, requests, heartbeats), :mod:`.identity` (the broker-id
files) and :mod:`.roles` (the interfaces to the replication and to the broker).
"""

from __future__ import annotations

from .controllers import ControllerError, Controllers
from .identity import BrokerIdentityFile
from .manager import RegisterState, ReplicasManager, State
from .roles import AutoSwitch, RoleSwitch

__all__ = [
    "AutoSwitch",
    "BrokerIdentityFile",
    "ControllerError",
    "Controllers",
    "RegisterState",
    "ReplicasManager",
    "RoleSwitch",
    "State",
]
