"""The storage layer: a partition is an append-only log of segment files with sparse indices.

Rules for this package: synchronous files and bytes only (no sockets, no asyncio); one writer
per partition log; every on-disk format is documented byte by byte in the module that writes
it (records.py for batches, index.py, checkpoint.py, epoch_cache.py); indices and the epoch
cache are derived data that recovery can rebuild from the segments.
"""

from raftlog.storage.config import LogConfig
from raftlog.storage.log import AppendInfo, FileSlice, PartitionLog

__all__ = ["AppendInfo", "FileSlice", "LogConfig", "PartitionLog"]
