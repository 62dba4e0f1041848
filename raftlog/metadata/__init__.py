"""Cluster metadata, replicated by a Raft quorum (KRaft-style): the only package that imports
pysyncobj.

- state.py: the deterministic state machine (brokers, topics and partitions, groups, offsets)
  and its versioned snapshot.
- partition_state.py: a partition's leader, epochs, ISR and ELR (PartitionState): every
  election rule, its transitions and invariants.
- groups.py: a consumer group's states, transitions and invariants (GroupState: the rebalance
  protocol).
- assignors.py: deterministic partition assignors for consumer groups.
- coordinator.py: consumer groups on the active controller (joins, heartbeats, expiry,
  rebalance deadlines, commits).
- group_requests.py: the coordinator's checks of group requests and its command size bounds.
- quorum.py: the state on pysyncobj, seen from asyncio.
- raft_journal.py: pysyncobj's journal, written so that a full disk is survivable.
- cluster.py: the broker's read/propose view of it.
- controller.py: broker liveness (UDP heartbeats, fencing) on the active controller.
- model.py: the metadata records exchanged with clients.
"""

from raftlog.metadata.model import BrokerInfo, PartitionInfo, TopicInfo

__all__ = ["BrokerInfo", "PartitionInfo", "TopicInfo"]
