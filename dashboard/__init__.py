"""``mqdashboard``: a web dashboard for operators (cluster and broker settings, topics, consumer
groups, producers, messages, message traces, dead letters, ACL accounts, live charts) on the
asyncio admin client. Server-side pages; the only script draws the charts and refreshes live
figures. Needs the ``dashboard`` extra."""

from .app import Settings, create_app

__all__ = ["Settings", "create_app"]
