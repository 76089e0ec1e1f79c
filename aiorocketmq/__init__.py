"""aiorocketmq: Apache RocketMQ 4.x on asyncio, in one import namespace.

The package holds the whole distribution:

- :mod:`aiorocketmq.protocol`: the remoting wire protocol (sans-IO codecs, one transport);
- :mod:`aiorocketmq.namesrv` and :mod:`aiorocketmq.broker`: the servers (``mqnamesrv``, ``mqbroker``);
- :mod:`aiorocketmq.client`: the asyncio SDK, whose public names are re-exported here;
- :mod:`aiorocketmq.pipeline`: the PySpark ``rocketmq`` data source;
- :mod:`aiorocketmq.tools`: ``mqadmin`` and ``mqbench``.

::

    from aiorocketmq import Message, Producer

    async with Producer("orders-producer", namesrv="127.0.0.1:9876") as producer:
        await producer.send(Message("Orders", b"..."))
"""

from aiorocketmq import compiled

# Before anything imports a hot module: the compiled build or the sources (compiled.py).
compiled.activate()

from aiorocketmq.client import *  # noqa: E402, F403  (the SDK's public names are the package's)
from aiorocketmq.client import __all__ as _client_all  # noqa: E402

__all__ = list(_client_all)
