"""Production topologies (issue 17): a separate lease database. (The
PostgreSQL failover, which kills servers, is with the fault tests:
tests/faults/test_failover.py.)"""
