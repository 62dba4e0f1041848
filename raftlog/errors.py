"""The operating errors of raftlog: one hierarchy, each error saying whether a retry can help.

Rules this module keeps:
- Operating errors (bad input, a full disk, an offset out of range) are `RaftlogError`s with a
  message that names the partition, file and values involved. Programmer errors are assertions.
- `retriable` is a class attribute: a client may retry a retriable error after a refresh or a
  backoff; a non-retriable one goes back to the caller unchanged.
- `code` is a stable small integer so that the wire protocol can carry errors by number.
"""

from __future__ import annotations


class RaftlogError(Exception):
    """Base of every operating error raised by raftlog."""

    retriable: bool = False
    code: int = 1


class CorruptRecordError(RaftlogError):
    """A record batch failed validation: bad checksum, impossible length, count mismatch."""

    code = 2


class RecordTooLargeError(RaftlogError):
    """A record batch is larger than the partition's `max_message_bytes`."""

    code = 3


class OffsetOutOfRangeError(RaftlogError):
    """The requested offset lies outside [log_start_offset, log_end_offset]."""

    code = 4

    def __init__(self, message: str, log_start_offset: int = -1, log_end_offset: int = -1):
        super().__init__(message)
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class StorageError(RaftlogError):
    """Writing or reading the log's files failed (ENOSPC, EIO, ...). The log stays consistent."""

    code = 5
    retriable = True


class LogOfflineError(StorageError):
    """An earlier I/O error could not be rolled back: the log refuses writes until reopened."""

    code = 6
    retriable = False


class InvalidConfigError(RaftlogError):
    """A configuration value is out of its allowed range."""

    code = 7


class InvalidOffsetError(RaftlogError):
    """An offset argument is not valid for the operation (e.g. a follower batch out of order)."""

    code = 8


class FencedLeaderEpochError(RaftlogError):
    """A leader append carries an epoch older than one the log has already seen."""

    code = 9
