"""The message store: commit log, consume queues, index, flush, checkpoint, recovery, retention."""
