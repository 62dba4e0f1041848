"""Client library: producers, consumers and admin clients, sync and asyncio.

Rules: imports the codec (records, protocol) and never the broker; options carry Kafka's names
(`acks`, `linger_ms`, `batch_size`, `auto_offset_reset`, ...) so a Kafka user finds their way.
"""

from raftlog.client.admin import Admin, AsyncAdmin, TopicDescription
from raftlog.client.consumer import AsyncConsumer
from raftlog.client.fetched import ConsumerRecord
from raftlog.client.producer import (
    AsyncProducer,
    Producer,
    RecordFuture,
    RecordFutures,
    RecordMetadata,
)
from raftlog.client.sync_consumer import Consumer
from raftlog.topics import TopicPartition

__all__ = [
    "Admin",
    "AsyncAdmin",
    "AsyncConsumer",
    "AsyncProducer",
    "Consumer",
    "ConsumerRecord",
    "Producer",
    "RecordFuture",
    "RecordFutures",
    "RecordMetadata",
    "TopicDescription",
    "TopicPartition",
]
