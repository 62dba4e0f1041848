"""raftlog: a Kafka-style distributed commit log in Python."""

__version__ = "0.1.0"
