"""Typed request and response bodies: one frozen dataclass per message, with its wire form.

raftlog's frames (raftlog/protocol.py) carry a msgpack body whose layout depends on the API
(docs/PROTOCOL.md). Each message type here owns that layout, at both ends: senders build the
type and call `to_body()`; receivers call `from_body(body)` and read fields. No other code
indexes a body's lists by position.

Rules:
- The wire bytes are the layout docs/PROTOCOL.md documents; a type changes them only with a
  new API version.
- A request body is checked once, against its shape (`protocol.check_request_body`, run by
  the broker's connection before any handler). `from_body` of a request trusts that check and
  only fills defaults; it raises nothing for a checked body.
- A response body comes from a broker; `from_body` of a response reads what the broker's
  `to_body` wrote (trailing fields a newer broker adds are ignored).
- Types are frozen: a message is a value. Lists on the wire are tuples here.

Where each API's types live is listed in docs/PROTOCOL.md.
"""
