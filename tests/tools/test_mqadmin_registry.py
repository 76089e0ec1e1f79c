"""The ``mqadmin`` package's registry (pure code, no cluster): every command module that
declares commands is listed, every listed command has a usage, and a name cannot be taken twice."""

from __future__ import annotations

import argparse
import importlib
import pkgutil
from types import ModuleType

import pytest

import aiorocketmq.tools.mqadmin as package
from aiorocketmq.tools.mqadmin import COMMANDS, main
from aiorocketmq.tools.mqadmin.command import CommandSet, Context, Result
from aiorocketmq.tools.mqadmin.registry import MODULES, collect


def test_every_module_that_declares_commands_is_registered() -> None:
    declaring = set()
    for info in pkgutil.iter_modules(package.__path__):
        if info.name == "__main__":
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        if isinstance(getattr(module, "commands", None), CommandSet):
            declaring.add(module.__name__)
    assert declaring == {module.__name__ for module in MODULES}
    assert list(COMMANDS) == [cmd.name for module in MODULES for cmd in module.commands]


def test_every_registered_command_prints_its_usage(capsys: pytest.CaptureFixture[str]) -> None:
    for name, cmd in COMMANDS.items():
        assert main(["help", name]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"usage: mqadmin {name} "), out
        assert cmd.description in " ".join(out.split())


def test_a_name_defined_twice_is_refused() -> None:
    async def run(ctx: Context, args: argparse.Namespace) -> Result:
        return Result(None)

    first, second = ModuleType("first"), ModuleType("second")
    first.commands = CommandSet()  # type: ignore[attr-defined]
    second.commands = CommandSet()  # type: ignore[attr-defined]
    first.commands.add("topicList", "one")(run)  # type: ignore[attr-defined]
    second.commands.add("topicList", "another")(run)  # type: ignore[attr-defined]
    assert list(collect((first,))) == ["topicList"]
    with pytest.raises(RuntimeError, match="topicList is defined twice"):
        collect((first, second))
