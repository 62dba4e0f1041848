"""The benchmarks: each module runs one (`python -m bench.<name>` or `raftlog bench ...`) and
writes its report under bench/results/.

Rules: bench/ imports raftlog, never the reverse (the `raftlog bench` command imports it when
its parser is built); the benchmarks start their clusters with raftlog.launcher; every wait has
a deadline; a figure is written with the machine facts that produced it (bench/common.py).
"""
