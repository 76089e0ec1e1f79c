"""The name server: a route registry that brokers register with and clients ask for routes."""
