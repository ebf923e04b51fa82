"""Production topologies (issue 17): a separate lease database, and a
PostgreSQL failover to a streaming-replication standby."""
