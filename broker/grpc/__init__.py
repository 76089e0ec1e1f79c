"""The broker's RocketMQ 5.x front: ``apache.rocketmq.v2.MessagingService`` over gRPC, so the
official 5.x clients (Python, Java, Node.js, Go) use this broker and its store directly, beside
the 4.x remoting port. ``messaging.proto`` declares the messages it speaks; ``make proto``
generates ``messaging_pb2*.py`` from it.
"""

from .endpoint import GrpcEndpoint
from .service import MessagingService

__all__ = ["GrpcEndpoint", "MessagingService"]
