"""``mqdashboard``: a web dashboard for operators (cluster, topics, consumer groups, producers,
messages, dead letters, live charts) on the asyncio admin client. Server-side pages; the only
script draws the charts and refreshes live figures. Needs the ``dashboard`` extra."""

from .app import Settings, create_app

__all__ = ["Settings", "create_app"]
