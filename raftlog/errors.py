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
    """The partition's log is offline on this broker: an I/O error that could not be rolled
    back, a failed fsync, a failed open (a full disk) or damaged data (LogCorruptedError).

    Retriable, as Kafka's KAFKA_STORAGE_ERROR: the broker reopens the log when the cause goes
    away, and with replication another replica may lead the partition.
    """

    code = 6
    retriable = True


class LogCorruptedError(LogOfflineError):
    """Data below the log's recovery point (fsynced, so not a torn write) is damaged.

    Recovery never truncates such data: the log stays offline on this broker, its files as they
    are, until an operator repairs it. Once the log is in the broker's offline table, requests
    for it get LogOfflineError (6) carrying this message. `log_path`, `position` and `offset`
    name the first damaged batch: its segment file, its byte position and the offset it should
    start with (-1 where unknown).
    """

    code = 32

    def __init__(self, message: str, log_path: str = "", position: int = -1, offset: int = -1):
        super().__init__(message)
        self.log_path = log_path
        self.position = position
        self.offset = offset


class InvalidConfigError(RaftlogError):
    """A configuration value is out of its allowed range."""

    code = 7


class InvalidOffsetError(RaftlogError):
    """An offset argument is not valid for the operation (e.g. a follower batch out of order)."""

    code = 8


class FencedLeaderEpochError(RaftlogError):
    """A request carries a leader epoch older than the partition's (KIP-320): the sender's
    metadata is stale (refresh and retry), or a deposed leader tried to append."""

    code = 9
    retriable = True


class UnknownTopicOrPartitionError(RaftlogError):
    """The topic or partition does not exist (on this broker)."""

    code = 10
    retriable = True  # metadata may be stale: it can appear after a refresh


class TopicAlreadyExistsError(RaftlogError):
    code = 11


class InvalidTopicError(RaftlogError):
    """A topic name breaks the naming rules (see raftlog.topics)."""

    code = 12


class InvalidPartitionsError(RaftlogError):
    code = 13


class InvalidReplicaAssignmentError(RaftlogError):
    """An explicit replica assignment that cannot be used: the wrong number of replicas, a
    broker named twice, an unknown broker, or partitions it does not cover (Kafka:
    INVALID_REPLICA_ASSIGNMENT)."""

    code = 62


class ElectionNotNeededError(RaftlogError):
    """A preferred-leader election for a partition its preferred leader already leads
    (Kafka: ELECTION_NOT_NEEDED)."""

    code = 63


class PreferredLeaderNotAvailableError(RaftlogError):
    """A preferred-leader election for a partition whose preferred leader (its first replica)
    is not a live ISR member (Kafka: PREFERRED_LEADER_NOT_AVAILABLE). Retriable: it may catch
    up and rejoin the ISR."""

    code = 64
    retriable = True


class OffsetNotAvailableError(RaftlogError):
    """A leader that has just taken over does not know its partition's committed end yet: its
    high watermark is below the start of its leader epoch until its followers' fetches move it
    (Kafka: OFFSET_NOT_AVAILABLE, KIP-207). Answering its older one would make a partition's
    end offset go back. Retriable: moments, while its ISR holds min.insync.replicas."""

    code = 65
    retriable = True


class InvalidRequestError(RaftlogError):
    """A request is well framed but its content is not acceptable."""

    code = 14


class NoReassignmentInProgressError(InvalidRequestError):
    """A cancel of a partition's reassignment when none is under way (Kafka:
    NO_REASSIGNMENT_IN_PROGRESS)."""

    code = 66


class InvalidRecordError(RaftlogError):
    """A record a partition cannot take as it is: a record without a key for a compacted
    topic (Kafka: INVALID_RECORD). Not retriable: the producer must change the record."""

    code = 67


class CleanFailedError(RaftlogError):
    """A log clean failed or was stopped (storage/cleaner.py, broker/cleaner_process.py). The
    broker's cleaner logs it and plans again; it never reaches a client."""

    code = 68


class UnsupportedVersionError(RaftlogError):
    """The API key or version is not one this server speaks."""

    code = 15


class RequestTimedOutError(RaftlogError):
    code = 16
    retriable = True


class NotLeaderOrFollowerError(RaftlogError):
    """This broker does not lead the partition: refresh metadata and retry."""

    code = 17
    retriable = True


class BrokerNotAvailableError(RaftlogError):
    """No connection to the broker could be made or kept."""

    code = 18
    retriable = True


class PolicyViolationError(RaftlogError):
    """A request breaks a server-side limit (max connections, request size, ...)."""

    code = 19


class NotEnoughReplicasError(RaftlogError):
    """acks=all refused before the append: the ISR is smaller than min.insync.replicas."""

    code = 20
    retriable = True


class NotEnoughReplicasAfterAppendError(RaftlogError):
    """acks=all: the records were appended by the leader, but the ISR fell below
    min.insync.replicas before they were committed. They may or may not be kept."""

    code = 40
    retriable = True


class InvalidUpdateVersionError(RaftlogError):
    """An ISR change names a partition epoch that is no longer current (Kafka's
    INVALID_UPDATE_VERSION): the partition changed meanwhile, maybe by this very change."""

    code = 42


class UnknownLeaderEpochError(RaftlogError):
    """A request carries a leader epoch newer than this broker knows (its metadata lags)."""

    code = 41
    retriable = True


class OutOfOrderSequenceError(RaftlogError):
    """An idempotent producer's batch does not continue its sequence on this partition (a
    gap: an earlier batch was lost, or the partition lost the producer's state). Kafka's
    OUT_OF_ORDER_SEQUENCE_NUMBER. Not retriable as such: the producer resends its earlier
    batches first, or bumps its epoch when the partition lost its state (KIP-360)."""

    code = 43


class InvalidProducerEpochError(RaftlogError):
    """A batch from an older epoch of a producer id whose newer epoch already wrote to the
    partition (Kafka's INVALID_PRODUCER_EPOCH): a zombie instance is fenced."""

    code = 44


class DuplicateSequenceError(RaftlogError):
    """A batch the partition appended before, older than the retained window, so its offsets
    are no longer known (Kafka's DUPLICATE_SEQUENCE_NUMBER): the producer counts it as
    delivered, with offset -1."""

    code = 45


class UnknownProducerIdError(RaftlogError):
    """InitProducerId could not be answered: no producer id block could be had from the
    metadata quorum in time (retriable: the quorum may be electing)."""

    code = 46
    retriable = True


class RaftlogTimeoutError(RaftlogError):
    """A client-side deadline passed (delivery_timeout_ms, a poll, a metadata wait)."""

    code = 21
    retriable = True


def _all_subclasses(cls: type[RaftlogError]) -> list[type[RaftlogError]]:
    out = []
    for sub in cls.__subclasses__():
        out.append(sub)
        out.extend(_all_subclasses(sub))
    return out


def error_class(code: int) -> type[RaftlogError]:
    """The error class for a wire error code (RaftlogError for codes this version lacks)."""
    for cls in _all_subclasses(RaftlogError):
        if cls.code == code:
            return cls
    return RaftlogError


def error_from_code(code: int, message: str) -> RaftlogError:
    cls = error_class(code)
    if cls is OffsetOutOfRangeError:
        return OffsetOutOfRangeError(message)
    return cls(message)


class InconsistentGroupProtocolError(RaftlogError, ValueError):
    """The members of a group share no partition assignor (Kafka: INCONSISTENT_GROUP_PROTOCOL).

    Not retriable: the members' configurations must change first.
    """

    code = 22


class CommitFailedError(RaftlogError):
    """An offset commit was refused: stale generation, not a member, or not the owner."""

    code = 23


class GroupNotEmptyError(RaftlogError):
    """The operation needs a group with no active members (reset-offsets, delete)."""

    code = 24


class UnknownMemberIdError(RaftlogError):
    """The member is not (or no longer) in the group: rejoin."""

    code = 25
    retriable = True


class IllegalGenerationError(RaftlogError):
    """The group has moved to a newer generation: rejoin."""

    code = 26
    retriable = True


class RebalanceInProgressError(RaftlogError):
    """The group is preparing a rebalance (Kafka: REBALANCE_IN_PROGRESS): the member commits
    its positions, gives up its partitions and joins again. Also the answer to a join that
    waited for its rebalance longer than the rebalance timeout allows (join again)."""

    code = 47
    retriable = True


class NotCoordinatorError(RaftlogError):
    """This node is not the group coordinator (the active controller): find it again."""

    code = 27
    retriable = True


class InvalidReplicationFactorError(RaftlogError):
    code = 28


class StaleBrokerEpochError(RaftlogError):
    """A broker spoke with an epoch from an old incarnation: it is a zombie and is ignored."""

    code = 29


class GroupIdNotFoundError(RaftlogError):
    code = 30


class NotControllerError(RaftlogError):
    """This node is not the active controller."""

    code = 31
    retriable = True


class FetchSessionIdNotFoundError(RaftlogError):
    """A follower's incremental fetch names a fetch session the leader does not have
    (expired, replaced, or the leader restarted): the follower opens a new one (KIP-227's
    FETCH_SESSION_ID_NOT_FOUND)."""

    code = 60
    retriable = True


class InvalidFetchSessionEpochError(RaftlogError):
    """A follower's incremental fetch carries the wrong session epoch (a request or answer
    was lost): the follower opens a new session (KIP-227's INVALID_FETCH_SESSION_EPOCH)."""

    code = 61
    retriable = True


class NotABrokerError(RaftlogError):
    """The peer at a bootstrap or broker address answered with bytes that are not raftlog
    frames (an HTTP server, a database, ...): a wrong host or port, so not retriable.

    Raised by the client only (a broker never sends it).
    """

    code = 33
