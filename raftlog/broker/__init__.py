"""The broker: the asyncio server, the connection protocol and the request handlers.

Rules: the asyncio shell stays thin; storage calls are synchronous on the loop thread (one
writer per log); handlers are split by API so that no coordinating class grows without bound.
"""

from raftlog.broker.server import Broker, BrokerConfig

__all__ = ["Broker", "BrokerConfig"]
