"""``manage.py bgtasks worker``: the loop that makes due work happen, and each of
its other jobs in a module of its own."""
