"""Request handlers, one module per request family; each exposes ``handlers(broker)``."""
