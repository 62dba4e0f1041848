"""Request handlers, one module per API family (produce, fetch, admin).

A handler is `handler(broker, body, payload, connection)` and returns a `Response` now, an
awaitable of one (a long-polling fetch), or None (acks=0 produce). It raises RaftlogError for a
request-level error; partition-level errors go inside the response, per partition.
"""
