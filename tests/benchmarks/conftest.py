"""The bench_*.py scripts are run by hand (`python tests/benchmarks/bench_x.py`), never by pytest."""

collect_ignore_glob = ["bench_*.py"]
