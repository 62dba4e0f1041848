"""Partition data replication: leader -> followers, ISR, high watermark, acks=all.

- `core.py`: the pure state machine of one partition on one broker (no I/O, no asyncio, no
  clock); events and `now_ms` in, actions out. Every rule of replication lives there.
- `manager.py`: the asyncio driver (ReplicaManager): runs the cores of the partitions a broker
  hosts, performs their actions on the partition logs, fetches from leaders, keeps waiting
  produce requests and proposes ISR changes to the metadata quorum.

Imports: storage, protocol, errors, the metadata model; never the broker's connection code.
"""
