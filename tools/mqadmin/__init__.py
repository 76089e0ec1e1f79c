"""``mqadmin``: cluster administration with RocketMQ's command names and option letters.

::

    mqadmin                      # the command list, as Apache's mqadmin prints it
    mqadmin help updateTopic     # one command's options
    mqadmin clusterList -n 127.0.0.1:9876
    mqadmin updateTopic -n 127.0.0.1:9876 -c DefaultCluster -t Orders -r 8 -w 8
    mqadmin consumerProgress -n 127.0.0.1:9876 -g billing --json

Each command prints aligned text for people, or one JSON document with ``--json`` (RocketMQ's
field names). A command that fails prints one line saying why on stderr and exits 1; bad
arguments print the usage and exit 2. Everything goes through the SDK (:class:`Admin`,
:class:`PullClient`, :class:`Producer`).

The commands live in modules by what they work on (:mod:`.topic`, :mod:`.group`,
:mod:`.consumer`, :mod:`.offset`, :mod:`.message`, :mod:`.broker`, :mod:`.cluster`,
:mod:`.namesrv`, :mod:`.acl`, ...), each declaring a :class:`~.command.CommandSet`;
:mod:`.registry` lists those modules and :mod:`.main` is the command line.
"""

from __future__ import annotations

from .command import Command, Context, Result
from .main import execute, main, parse_args
from .registry import COMMANDS

__all__ = ["COMMANDS", "Command", "Context", "Result", "execute", "main", "parse_args"]
