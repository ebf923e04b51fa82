"""MySQL's and MariaDB's driver: the lease and workers' statements
(``leases``), the queue's (``queue``, its enqueue in ``enqueue``, MariaDB's
own in ``mariadb``), MariaDB's stored procedures (``routines``), the schema
its migrations install (``schema``), the server probes its checks need
(``probes``), and how they run (``driver``)."""
