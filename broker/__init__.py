"""The broker: stores messages and serves the RocketMQ request codes over the remoting protocol."""
