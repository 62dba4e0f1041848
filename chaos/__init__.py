"""The chaos suite: faults as data, injectors that always heal, and a Jepsen-style checker.

Modules: history (the history.jsonl format), checker (a pure function of a history),
faults (FaultSpec, seeded schedules, process and network injectors), netns (partitions with
network namespaces and iptables), local_cluster (the LOCAL backend's nodes as processes),
docker_cluster (the DOCKER backend: docker/compose.yaml's containers, iptables inside them),
disk_faults (full disk, torn tail, flipped byte), toxiproxy_server (Toxiproxy's HTTP API).

Rules: chaos/ imports raftlog, never the reverse (the `raftlog chaos` command imports it when it
runs); the checker reads no clock and no file; every injector heals on exit; every
wait has a deadline; everything a run did is written down as data (specs, damages, history).
"""
