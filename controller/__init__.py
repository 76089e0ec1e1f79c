"""The controller of RocketMQ 5's controller mode: which broker of each group is master.

Brokers of a group (one broker name) register with the controller, get their broker ids from
it and heartbeat to it; the master reports which replicas are in sync with it (the
SyncStateSet). When the master stops heartbeating, the controller elects a new one from the
SyncStateSet and tells the group. Its state is replicated over three or more replicas by Raft
(PySyncObj), so losing one controller loses no decision. It runs embedded in ``mqnamesrv``
(``enableControllerInNamesrv``) or on its own (``mqcontroller``); docs/controller.md.

Modules: :mod:`.replicas` (the pure state machine: Apache's ReplicasInfoManager and
DefaultElectPolicy), :mod:`.heartbeat` (broker liveness), :mod:`.raft` (PySyncObj, bridged to
asyncio), :mod:`.manager` (:class:`~.manager.ControllerManager`: one replica's remoting server,
request handling, elections and notifications), :mod:`.config` (Apache's ControllerConfig
keys) and ``__main__`` (``mqcontroller -c controller.conf``). Nothing is imported here, so
that the name server reads the controller's settings without PySyncObj installed.
"""
