"""Cluster metadata: topics, partitions, leaders and (later) brokers, groups and offsets.

`MetadataStore` is the interface the broker consults. `LocalMetadata` (local.py) is the
single-node implementation that keeps topics in a JSON file in the data directory; the Raft
quorum (pysyncobj) replaces it in a multi-node cluster, behind the same interface. This package
is the only one that will import pysyncobj.
"""

from raftlog.metadata.local import LocalMetadata
from raftlog.metadata.model import BrokerInfo, PartitionInfo, TopicInfo

__all__ = ["BrokerInfo", "LocalMetadata", "PartitionInfo", "TopicInfo"]
