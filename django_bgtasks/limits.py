"""Every size and default that more than one place needs, once: the tables'
column lengths (models.py's ``max_length``, and the checks that refuse a longer
value before any SQL), the ttl bounds and defaults, and the worker's bounds.

The lowest layer: it imports nothing from the package, so that models,
validation, the SQL and the command can all read it. Changing a column length
here changes a model field, so it needs a migration; CI's
``makemigrations --check`` (.ci/run, noxfile.py) says so.
"""

from __future__ import annotations

# --- column lengths ----------------------------------------------------------------
# Names and owners: room for a dotted task path or a ``host:pid:random`` owner
# (HOST_LENGTH below keeps the default owner inside it). Lease operations
# refuse longer ones (validation); ``requested_by`` is cut to the owner's.
MAX_NAME_LENGTH = 200
MAX_OWNER_LENGTH = 200
# Why a run's return value was not stored (``result_note``): one short line.
MAX_RESULT_NOTE_LENGTH = 500
# The stored schedule text (``BackgroundTask.schedule``): a cron expression or
# an ``every`` interval; parse_schedule refuses a longer one.
MAX_SCHEDULE_LENGTH = 100
# A Django Task's unique key (``QueuedTask.unique_key`` and ``active_key``, a
# unique index): the most MySQL/MariaDB index in a unique text column;
# ``enqueue`` refuses a longer key (docs/django-tasks.md).
MAX_UNIQUE_KEY_LENGTH = 255
# A Django Task's dotted function path, and the alias of its backend and queue
# (both names from the TASKS setting).
MAX_TASK_PATH_LENGTH = 300
MAX_BACKEND_LENGTH = 100
MAX_QUEUE_NAME_LENGTH = 100
# A task's stored W3C trace context (``trace_context``, django_bgtasks.tracing):
# a version-00 ``traceparent`` (55 characters), a space and a ``tracestate`` of
# at most 512 characters, what W3C asks every system to pass on at least. A
# longer one is stored without its ``tracestate``; one read back longer is ignored.
MAX_TRACE_CONTEXT_LENGTH = 568
# Choice columns: choices.Outcome's values, choices.Trigger's, and the queue
# statuses (READY, RUNNING...), each with room to add a value.
OUTCOME_LENGTH = 32
TRIGGER_LENGTH = 16
QUEUE_STATUS_LENGTH = 16
# The worker's host column (``BackgroundWorker.host``): wider than HOST_LENGTH,
# which is what is written to it.
HOST_COLUMN_LENGTH = 200

# --- the host name --------------------------------------------------------------------
# Where a host name is cut, for the default owner ``host:pid:hex8`` and the
# worker's row: a pid (at most 7 digits on Linux) and 8 hex digits with two
# colons fit the 200-character owner column after 150 characters. Linux host
# names are at most 64 characters, so the cut is only a bound.
HOST_LENGTH = 150

# --- values ---------------------------------------------------------------------------
# The longest error text kept (validation.clean_error: a run's ``error``, a
# Django Task's traceback): enough for a traceback, not a log.
MAX_ERROR_LENGTH = 10_000
# Progress values are small; deep nesting is a bug. MariaDB's JSON_VALID (the
# check on its JSON columns) refuses 32 levels, so 31 is the limit everywhere:
# a value that one vendor stores, every vendor stores.
MAX_VALUE_DEPTH = 31

# --- ttl ------------------------------------------------------------------------------
# The default lease duration: ``BGTASKS_TTL``'s default (docs/settings.md)
# and the model default of ``QueuedTask.ttl``, which must agree with it.
DEFAULT_TTL = 120.0
# A lease that nobody may take over for more than a day after its holder died
# is a mistake, and the bound keeps ``ttl * interval '1 second'`` in range.
MAX_TTL = 86400.0
# The shortest lease: the heartbeat (every ttl/3, and always below ttl/2) plus
# a database round trip must fit in it, or it expires between two heartbeats.
MIN_TTL = 0.1
# The ttl a worker states in its row (three of its beats, every 5 s: see
# worker/heartbeat.py's WORKER_TTL_BEATS): silent for longer, it is listed as silent.
WORKER_TTL = 15.0
# Live workers and ``bgtasks prune`` remove the rows of workers silent this
# long (seconds), and past their own ttl: they were killed, and could not
# remove their own. Until then the rows stay, listed as silent, so that an
# operator sees which worker died and when.
FORGET_WORKERS_AFTER = 3600.0

# --- retries and the worker's bounds --------------------------------------------------
# The most runs a task may be given (``max_attempts=`` of @background_task, a
# LeaseBackend's MAX_ATTEMPTS): more is a loop, not a retry policy.
MAX_ATTEMPTS = 1000
# A Django Task's flow limits (``@task(concurrency=N)``, ``rate_limit="N/s"``):
# each is N slot rows per key (``FlowSlot``), so N is bounded; more than this
# many at once, or starts in one window, is no limit. The key's column is as
# long as the unique key's (the most MySQL/MariaDB index in a unique column).
MAX_FLOW_LIMIT = 10_000
MAX_FLOW_KEY_LENGTH = 255
FLOW_KIND_LENGTH = 16
# A fairness key's weight (queue/fairness.py): its shares of the workers
# against a key of weight 1. Bounded so that a typing mistake (a weight of
# 1,000,000) doesn't starve every other key for good.
MAX_FAIRNESS_WEIGHT = 1_000
# A worker's poll (seconds between looks for due work) and its grace on
# SIGTERM: an hour between looks, or a day's wait to stop, is a typing mistake.
MAX_POLL = 3600.0
MAX_GRACE = 86400.0
# A Django Task's retry_delay= doubles on each attempt up to this many seconds
# (an hour), before its +-10 % jitter; retry_delay= itself is at most this.
MAX_RETRY_DELAY = 3600.0
# The jitter of a retry's delay: a fraction of it, either way.
RETRY_JITTER = 0.1
# A Django Task a worker can't import (an old release's worker, during a
# deploy) goes back to the queue for this long at most (seconds), doubling
# from 1 s with each hand-back; it fails once no worker has imported it for
# the backend's IMPORT_DEADLINE, an hour unless set (queue/execute.py).
MAX_IMPORT_RETRY_DELAY = 30.0
IMPORT_DEADLINE = 3600.0
# The longest timeout= a task may declare (seconds): a week.
MAX_TIMEOUT = 604800.0

# --- the operator's reads ---------------------------------------------------------------
# Where a count of Django Tasks stops: the admin's list and its filters'
# counts, and the metrics' backlog, show "10,000+" (and the metrics that
# number) rather than read every row of a big table (operations/queued.py).
COUNT_CAP = 10_000
# The most Django Tasks a page of the JSON API's list holds (``?limit=``).
MAX_PAGE_SIZE = 500
