"""The start/shutdown life of the SDK's clients: ``async with`` starts a client and shuts it down,
and a client that is no more than a share of a :class:`ClientInstance` (the admin client, the
simple consumer) acquires it on start and releases it on shutdown.

Each client states only its own start and shutdown; the context-manager protocol and the
instance bookkeeping are written once here."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from types import TracebackType
from typing import ClassVar, Self

from .client_instance import ClientInstance, ClientOptions, acquire_instance, release_instance
from .errors import ClientStateError


class ClientLifecycle(ABC):
    """``async with client:`` is ``await client.start()``, then ``await client.shutdown()`` on
    the way out, whatever ends the block."""

    @abstractmethod
    async def start(self) -> None: ...

    @abstractmethod
    async def shutdown(self) -> None: ...

    def _stop_fetching(self) -> None:
        """Take no new work from the brokers, ahead of a shutdown (see :mod:`.signals`);
        consumers stop pulling, other clients have nothing to stop."""
        return None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.shutdown()


class InstanceClient(ClientLifecycle):
    """A client whose connections are its share of the process's :class:`ClientInstance` for
    ``namesrv`` and ``instance_name``; the subclass's ``__init__`` sets the attributes below."""

    #: How error messages name the client ("the admin client") and how to start it.
    _describes: ClassVar[str]
    _started_by: ClassVar[str]

    namesrv: str | Iterable[str] | None
    instance_name: str
    options: ClientOptions
    _acquired: ClientInstance | None

    async def start(self) -> None:
        if self._acquired is not None:
            raise ClientStateError(f"{self._describes} was already started")
        self._acquired = acquire_instance(self.namesrv, self.instance_name, self.options)

    async def shutdown(self) -> None:
        if self._acquired is not None:
            instance, self._acquired = self._acquired, None
            await release_instance(instance)

    @property
    def _instance(self) -> ClientInstance:
        if self._acquired is None:
            raise ClientStateError(f"{self._describes} is not started; use '{self._started_by}'")
        return self._acquired
