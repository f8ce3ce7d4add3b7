"""Requests meeting steps: the serving search (`throughput`), the request simulator (event engine, compiled loop, streaming statistics, traces, prefix hits) and sweeps."""
