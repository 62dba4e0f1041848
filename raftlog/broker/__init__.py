"""The broker: the asyncio server, the connection protocol and the request handlers.

Rules: the asyncio shell stays thin; storage calls are synchronous on the loop thread (one
writer per log); handlers are split by API so that no coordinating class grows without bound.
"""

from raftlog.broker.config import BrokerConfig
from raftlog.broker.server import Broker

__all__ = ["Broker", "BrokerConfig"]
