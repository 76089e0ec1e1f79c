"""Every ``mqadmin`` command, by name: the command modules are listed here, in the order
``mqadmin help`` shows their commands, and each contributes the :class:`CommandSet` it declares.
A command module that is not listed here is not part of the tool."""

from __future__ import annotations

from types import ModuleType

from . import (
    acl,
    auth,
    broker,
    cluster,
    consumer,
    controller,
    export,
    group,
    message,
    namesrv,
    offset,
    producer,
    static_topic,
    stats,
    topic,
)
from .command import Command

MODULES: tuple[ModuleType, ...] = (
    topic,
    static_topic,
    group,
    consumer,
    offset,
    producer,
    message,
    broker,
    cluster,
    controller,
    namesrv,
    acl,
    auth,
    stats,
    export,
)


def collect(modules: tuple[ModuleType, ...]) -> dict[str, Command]:
    """The commands of ``modules`` by name; a name defined twice is a programming error."""
    commands: dict[str, Command] = {}
    for module in modules:
        for cmd in module.commands:
            if cmd.name in commands:
                raise RuntimeError(f"mqadmin command {cmd.name} is defined twice ({module.__name__})")
            commands[cmd.name] = cmd
    return commands


COMMANDS: dict[str, Command] = collect(MODULES)
