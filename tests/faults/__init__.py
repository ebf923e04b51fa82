"""Faults in real processes: the runner and the lease against SIGKILL, SIGSTOP,
database restarts, a network partition, races between processes, and the
torture profile (``torture/``). The workers are started with ``python -m
tests.procs`` and ``python -m tests.faults.torture.<module>``."""
