"""PostgreSQL's notifications: the channels migrations' triggers notify and
the change feed (:mod:`django_bgtasks.push.feed`) listens to, on one
connection a process."""

from __future__ import annotations

# --- Change notifications (django_bgtasks.push.feed) ----------------------------
# PostgreSQL: migration 0008's trigger notifies this channel, with JSON
# {"name": ..., "token": ...}, for every change of a lease row but a bare
# heartbeat; each process's one listening connection runs LISTEN_CHANGES, and
# names itself CHANGES_APPLICATION (so an operator can find it in
# pg_stat_activity). SQLite and MySQL have no notifications: the feed there
# polls with list_states, one statement per process per interval.
CHANGES_CHANNEL = "bgtasks_changes"
LISTEN_CHANGES = f"LISTEN {CHANGES_CHANNEL}"
CHANGES_APPLICATION = "bgtasks-changes"
# Set once the connection proved direct (cursor.direct_session): through a
# pooler the name would stay on a server connection the feed doesn't hold.
NAME_APPLICATION = "SELECT set_config('application_name', %s, false)"
# Migration 0010's trigger notifies this one, with JSON {"queue": ...}, when a
# Django Task becomes ready (enqueued, retried, recovered); the same
# connection listens, for the workers' queue threads.
QUEUE_CHANNEL = "bgtasks_queue"
LISTEN_QUEUE = f"LISTEN {QUEUE_CHANNEL}"
