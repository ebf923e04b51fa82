"""``manage.py demo_replica``: one replica of the site, as the demo runs it.

Like a scheduler that runs inside every replica of a site, it tries to start
log-cleanup every ``--poll`` seconds until a run of it has succeeded. The
lease decides which replica runs it; the others are told who holds it. Every
loop it also reads the task's state from the database, as any page or API call
on any replica would.

It speaks JSON lines on stdout, one event each, for the demo to show:
``ready``, then (after a line on stdin, so that all replicas start together)
``claimed``/``refused`` for its first try, ``seen`` for every read,
``claimed`` for a later takeover, ``finished`` when its own run ends, and
``done``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, TypeGuard

from django.core.management.base import BaseCommand, CommandParser
from django.db import connection

from demo_site.tasks import log_cleanup
from django_bgtasks.leases import TaskState
from django_bgtasks.models import BackgroundTask
from django_bgtasks.runner import RunningLease


class Command(BaseCommand):
    help = "Run one replica of the demo: try to start log-cleanup until a run has succeeded."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--after-token",
            type=int,
            default=0,
            help="Stop once a run with a higher token has succeeded (default: %(default)r).",
        )
        parser.add_argument(
            "--poll",
            type=float,
            default=0.25,
            help="Seconds between tries and reads (default: %(default)r).",
        )

    def handle(self, *args: Any, after_token: int, poll: float, **options: Any) -> None:
        name = log_cleanup.name
        parent = os.getppid()
        connection.ensure_connection()  # connect before the start line, not after
        self.emit("ready", pid=os.getpid())
        sys.stdin.readline()

        mine: RunningLease | None = None
        first_try = True
        while os.getppid() == parent:  # the demo is gone: so are we
            state = BackgroundTask.objects.get_state(name)
            if mine is not None and mine.wait(0):
                self.emit(
                    "finished",
                    token=mine.token,
                    result=mine.result,
                    error=repr(mine.exception) if mine.exception else None,
                )
                mine = None
            if mine is None and succeeded_since(state, after_token):
                self.emit("done", token=state.token, owner=state.owner)
                return
            if state is not None and not first_try:
                self.emit("seen", state=state.as_json())
            # As a scheduler on every replica would: start the task when it reads
            # as not running (never run, ended without success, or its holder
            # went silent past the ttl). Trying while it runs would only be
            # refused, and trying after a success would run it twice.
            if mine is None and (first_try or state is None or not state.running):
                took_over = state is not None and state.stale
                mine = log_cleanup.start()
                if mine is not None:
                    self.emit("claimed", token=mine.token, owner=mine.owner, took_over=took_over)
                elif first_try:
                    state = BackgroundTask.objects.get_state(name)
                    self.emit(
                        "refused",
                        owner=state.owner if state else None,
                        token=state.token if state else None,
                    )
            first_try = False
            time.sleep(poll)

    def emit(self, event: str, **data: Any) -> None:
        self.stdout.write(json.dumps({"event": event, **data}))
        self.stdout.flush()


def succeeded_since(state: TaskState | None, token: int) -> TypeGuard[TaskState]:
    """Whether a run with a token above ``token`` has succeeded."""
    return (
        state is not None
        and state.token > token
        and not state.running
        and state.outcome == "succeeded"
    )
