"""Request handlers, one module per request family; each family is a class built with only
the broker parts it uses, whose ``handlers()`` maps its request codes to its methods."""
