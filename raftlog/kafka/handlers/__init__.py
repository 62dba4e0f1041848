"""Kafka request handlers: one module per API family, each calling the broker's operations.

A handler is `handle_x(ctx, request, version, source)`:
- `ctx` is the broker as a `HandlerContext` (raftlog/broker/context.py) and `source` the
  connection as a `RequestSource`; `request` is the decoded request (raftlog.kafka.messages)
  and `version` the API version it came in, which the response will be encoded at.
- It returns the response object, or an awaitable of one when it must wait (a quorum
  proposal, a new producer id block). The connection encodes it; a handler never touches the
  connection, its bytes or its header.
- It never implements a partition or topic rule twice: it calls the operations the native
  handlers (raftlog/broker/handlers/) call, and only translates their arguments and their
  errors (`raftlog.kafka.errors.kafka_code`, with the error's message wherever the version
  has an error_message field). Per-partition and per-topic errors go inside the response;
  a handler does not raise a RaftlogError out.

This is the one part of raftlog.kafka that knows the broker: through those two Protocols,
and, for Produce and Fetch, the native handlers' building blocks (ProduceGroup, long_poll,
Response), so that the two listeners share one produce and one fetch path.

Each module names its APIs in `HANDLERS`, {api key: handler}; registry.py combines them.
"""
