"""Fault injection on real processes: the torture run and its helpers.

``test_torture.py`` starts a chaos process (``chaos.py``) that runs eight
worker processes (``workers.py``) taking turns on one short lease and making
fenced writes to a ledger, while it pauses, kills and restarts them, restarts
PostgreSQL, and cancels and force-releases leases from the command line.
``invariants.py`` then checks, from the database and the processes' journals,
that no fault broke the lease's guarantees. See docs/reliability.md.
"""
