"""Kafka's error codes, and which one answers each of raftlog's operating errors.

Rules this module keeps:
- `ErrorCode` holds Kafka's own numbers (clients/src/main/java/org/apache/kafka/common/
  protocol/Errors.java), UNKNOWN_SERVER_ERROR (-1) through SNAPSHOT_NOT_FOUND (98).
  raftlog's `RaftlogError.code` numbers belong to raftlog's native protocol and differ:
  never send one to a Kafka client.
- `kafka_code` maps every RaftlogError subclass deliberately (a table test checks that each
  class of raftlog/errors.py is in `_BY_CLASS`): a new raftlog error must be placed here.
  Anything else (a bug, an OSError that escaped) is UNKNOWN_SERVER_ERROR (-1).
"""

from __future__ import annotations

from enum import IntEnum

from raftlog import errors as e


class ErrorCode(IntEnum):
    """Kafka's error codes as they go on the wire (int16)."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98


# Each raftlog error class and the Kafka code that tells a Kafka client the same thing. The
# lookup walks the raised error's class hierarchy, so a subclass missing here would fall back
# to its parent's code; the table test makes sure none is missing.
_BY_CLASS: dict[type[BaseException], ErrorCode] = {
    e.RaftlogError: ErrorCode.UNKNOWN_SERVER_ERROR,
    e.CorruptRecordError: ErrorCode.CORRUPT_MESSAGE,
    e.RecordTooLargeError: ErrorCode.MESSAGE_TOO_LARGE,
    e.OffsetOutOfRangeError: ErrorCode.OFFSET_OUT_OF_RANGE,
    e.StorageError: ErrorCode.KAFKA_STORAGE_ERROR,
    e.LogOfflineError: ErrorCode.KAFKA_STORAGE_ERROR,
    e.LogCorruptedError: ErrorCode.KAFKA_STORAGE_ERROR,
    e.InvalidConfigError: ErrorCode.INVALID_CONFIG,
    # Only a follower's append raises it (a batch that does not continue the log); Kafka has
    # no code for it either (its UnexpectedAppendOffsetException is an unknown server error).
    e.InvalidOffsetError: ErrorCode.UNKNOWN_SERVER_ERROR,
    e.FencedLeaderEpochError: ErrorCode.FENCED_LEADER_EPOCH,
    e.UnknownTopicOrPartitionError: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    e.TopicAlreadyExistsError: ErrorCode.TOPIC_ALREADY_EXISTS,
    e.InvalidTopicError: ErrorCode.INVALID_TOPIC_EXCEPTION,
    e.InvalidPartitionsError: ErrorCode.INVALID_PARTITIONS,
    e.InvalidReplicaAssignmentError: ErrorCode.INVALID_REPLICA_ASSIGNMENT,
    e.ElectionNotNeededError: ErrorCode.ELECTION_NOT_NEEDED,
    e.NoReassignmentInProgressError: ErrorCode.NO_REASSIGNMENT_IN_PROGRESS,
    e.OffsetNotAvailableError: ErrorCode.OFFSET_NOT_AVAILABLE,
    e.PreferredLeaderNotAvailableError: ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
    e.InvalidRequestError: ErrorCode.INVALID_REQUEST,
    e.InvalidRecordError: ErrorCode.INVALID_RECORD,
    e.CleanFailedError: ErrorCode.UNKNOWN_SERVER_ERROR,  # never on the wire
    e.UnsupportedVersionError: ErrorCode.UNSUPPORTED_VERSION,
    e.RequestTimedOutError: ErrorCode.REQUEST_TIMED_OUT,
    e.NotLeaderOrFollowerError: ErrorCode.NOT_LEADER_OR_FOLLOWER,
    e.BrokerNotAvailableError: ErrorCode.BROKER_NOT_AVAILABLE,
    e.PolicyViolationError: ErrorCode.POLICY_VIOLATION,
    e.NotEnoughReplicasError: ErrorCode.NOT_ENOUGH_REPLICAS,
    e.NotEnoughReplicasAfterAppendError: ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    e.InvalidUpdateVersionError: ErrorCode.INVALID_UPDATE_VERSION,
    e.UnknownLeaderEpochError: ErrorCode.UNKNOWN_LEADER_EPOCH,
    e.OutOfOrderSequenceError: ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
    e.InvalidProducerEpochError: ErrorCode.INVALID_PRODUCER_EPOCH,
    e.DuplicateSequenceError: ErrorCode.DUPLICATE_SEQUENCE_NUMBER,
    # raftlog raises it when InitProducerId finds no producer id block in time (the quorum may
    # be electing). Kafka's broker answers that case with COORDINATOR_LOAD_IN_PROGRESS, which
    # every client retries; Kafka's UNKNOWN_PRODUCER_ID (59) means "the partition lost this
    # producer's state" and would be fatal to a Java client's InitProducerId.
    e.UnknownProducerIdError: ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    e.RaftlogTimeoutError: ErrorCode.REQUEST_TIMED_OUT,
    e.InconsistentGroupProtocolError: ErrorCode.INCONSISTENT_GROUP_PROTOCOL,
    # Refused commits: a stale generation or a member that left; both tell a Kafka consumer
    # to rejoin, which ILLEGAL_GENERATION does.
    e.CommitFailedError: ErrorCode.ILLEGAL_GENERATION,
    e.GroupNotEmptyError: ErrorCode.NON_EMPTY_GROUP,
    e.UnknownMemberIdError: ErrorCode.UNKNOWN_MEMBER_ID,
    e.IllegalGenerationError: ErrorCode.ILLEGAL_GENERATION,
    e.RebalanceInProgressError: ErrorCode.REBALANCE_IN_PROGRESS,
    e.NotCoordinatorError: ErrorCode.NOT_COORDINATOR,
    e.InvalidReplicationFactorError: ErrorCode.INVALID_REPLICATION_FACTOR,
    e.StaleBrokerEpochError: ErrorCode.STALE_BROKER_EPOCH,
    e.GroupIdNotFoundError: ErrorCode.GROUP_ID_NOT_FOUND,
    e.NotControllerError: ErrorCode.NOT_CONTROLLER,
    e.FetchSessionIdNotFoundError: ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
    e.InvalidFetchSessionEpochError: ErrorCode.INVALID_FETCH_SESSION_EPOCH,
    # Raised by raftlog's client only, about a peer that is not a broker: never sent.
    e.NotABrokerError: ErrorCode.UNKNOWN_SERVER_ERROR,
}


def kafka_code(error: BaseException) -> int:
    """The Kafka error code that answers `error` (UNKNOWN_SERVER_ERROR for anything that is
    not a raftlog operating error)."""
    for cls in type(error).__mro__:
        code = _BY_CLASS.get(cls)
        if code is not None:
            return int(code)
    return int(ErrorCode.UNKNOWN_SERVER_ERROR)


# Errors of the coordinator's own machinery (its Raft quorum, its journal) that a group client
# must read as "find the coordinator again" or "retry here", as Kafka's group coordinator
# rewrites the errors of its own log (CoordinatorOperationExceptionHelper): leadership lost ->
# NOT_COORDINATOR; no answer in time -> COORDINATOR_NOT_AVAILABLE. A raw NOT_CONTROLLER or
# REQUEST_TIMED_OUT is an error group clients do not expect from a group API.
_GROUP_BY_CLASS: dict[type[BaseException], ErrorCode] = {
    e.NotControllerError: ErrorCode.NOT_COORDINATOR,
    e.StorageError: ErrorCode.NOT_COORDINATOR,
    e.RequestTimedOutError: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    e.RaftlogTimeoutError: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    e.NotEnoughReplicasError: ErrorCode.COORDINATOR_NOT_AVAILABLE,
}


def group_error_code(error: BaseException) -> int:
    """The Kafka error code that answers `error` raised by the group coordinator: `kafka_code`,
    except for the coordinator's own failures (`_GROUP_BY_CLASS`)."""
    for cls in type(error).__mro__:
        code = _GROUP_BY_CLASS.get(cls)
        if code is not None:
            return int(code)
    return kafka_code(error)
