"""Kafka's wire protocol, spoken by raftlog's brokers so that Kafka's own clients can use them.

Rules this package keeps:
- Pure: encode and decode bytes, nothing else. No sockets, no files, no asyncio, no clock;
  the broker's connection reads frames and hands them here, then writes what comes back.
- The codec (`wire`, `api`, `errors`, `frames`, `messages`) imports nothing of the broker;
  `handlers` is the broker-side shell: it calls the broker's operations through
  raftlog/broker/context.py's HandlerContext and reuses the native handlers' building blocks
  (ProduceGroup, long_poll, Response), so nothing about partitions is written twice. Nothing
  here imports kafka-python or any other Kafka library: those are test oracles only.
- Bad input from the network is a `wire.KafkaDecodeError` (a `RemoteProtocolError`) naming the
  API, version and field, never an IndexError or struct.error, and never a huge allocation.
- Record data (a partition's record batches) passes through as memoryview slices of the
  request frame and as the caller's own parts in responses: this package never reads it.

Modules: `wire` (primitives: Reader and Writer), `errors` (Kafka's error codes and the mapping
from raftlog's errors), `api` (API keys, supported versions, the consumer-group APIs' versions
not served yet, request and response headers), `frames` (Kafka's framing, for the
connection), `messages` (one module per API family: typed requests and responses at every
version the codec speaks, and the consumer protocol's embedded bytes), `handlers` (the Kafka
listener's request handlers, registry.py binds them). The connection is
raftlog/broker/kafka_connection.py.
"""
