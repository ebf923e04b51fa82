"""The worker side of the torture and partition tests:
``python -m tests.faults.torture.workers <scenario> ...``.

Each process sets Django up from its environment as ``tests.procs`` does.
Torture workers write a *journal*: one JSON line per thing they did or were
told (a claim, a commit, a refusal, a loss), written with one ``write()`` so
that a SIGKILL loses at most the event in progress. The journals survive the
workers, and the invariant checks compare them with what the database holds.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
from typing import Any

from tests.procs import (
    ENV_DB,
    _db_now,
    _ledger_increment,
    _ready,
    _result,
    _setup_django,
    standby,
)

# What a worker's database calls raise while PostgreSQL restarts or the
# network is cut: retried, like a real job would, until the lease is lost.
OUTAGE_NAMES = ("OperationalError", "InterfaceError")


class Boom(Exception):
    """A body that fails on purpose, so that history holds ``failed`` runs."""


class Journal:
    """Append-only JSON lines, each written with a single ``os.write``."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()

    def __call__(self, event: str, **fields: Any) -> None:
        line = json.dumps({"e": event, "t": time.monotonic(), **fields}) + "\n"
        with self._lock:  # the heartbeat thread writes too (lease_lost)
            os.write(self._fd, line.encode())


# --- the torture worker ----------------------------------------------------------


def torture(journal_path: str, name: str, ttl_text: str, seed: str) -> None:
    """Loop until told to stop: claim ``name`` under ``lease()``, do a random
    amount of random work with fenced increments of the ``name`` counter,
    and journal everything. A lost lease ends with a zombie's attempt to
    write with the old token, which the database must refuse."""
    from django.db import InterfaceError, OperationalError, connection

    from django_bgtasks import LeaseHeld, LeaseLost, TaskCancelled, lease
    from django_bgtasks.core.leases import default_owner
    from django_bgtasks.signals import lease_lost, lease_released

    ttl = float(ttl_text)
    rng = random.Random(int(seed))
    journal = Journal(journal_path)
    owner = default_owner()
    journal("start", owner=owner, pid=os.getpid())

    def on_lost(*, owner: str, token: int, reason: str, **kwargs: Any) -> None:
        journal("lost", token=token, reason=reason)

    def on_released(*, owner: str, token: int, outcome: str, **kwargs: Any) -> None:
        journal("released", token=token, outcome=outcome)

    lease_lost.connect(on_lost, weak=False)
    lease_released.connect(on_released, weak=False)
    if connection.vendor == "mysql":
        # The chaos process finds this worker's sessions (in any thread: the
        # heartbeat has its own) in information_schema.PROCESSLIST by id.
        from django.db.backends.signals import connection_created

        def on_connected(*, connection: Any, **kwargs: Any) -> None:
            with connection.cursor() as cursor:
                cursor.execute("SELECT CONNECTION_ID()")
                journal("session", id=int(cursor.fetchone()[0]))

        connection_created.connect(on_connected, weak=False)

    stop = threading.Event()

    def read_stdin() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        stop.set()  # "stop", or the chaos process went away

    threading.Thread(target=read_stdin, daemon=True).start()
    connection.ensure_connection()
    print("ready", flush=True)

    while not stop.is_set():
        running = None
        try:
            with lease(name, ttl=ttl, value={"by": owner}) as running:
                journal("claim", token=running.token)
                _body(running, journal, rng, name, ttl)
        except LeaseHeld:
            time.sleep(rng.uniform(0.02, 0.08))
        except LeaseLost as exc:
            assert running is not None
            journal("exit", token=running.token, how="lost", reason=exc.reason)
            _zombie_write(running, journal, name)
        except TaskCancelled:
            assert running is not None
            journal("exit", token=running.token, how="cancelled")
        except Boom:
            assert running is not None
            journal("exit", token=running.token, how="failed")
        except (OperationalError, InterfaceError) as exc:
            # Only the claim can get here: the body retries its own writes,
            # and the runner retries renewals and the release.
            journal("outage", error=str(exc).strip()[:200])
            connection.close()
            time.sleep(0.1)
        else:
            journal("exit", token=running.token, how="succeeded")
    journal("stop")
    _result({"owner": owner})


def _body(running: Any, journal: Journal, rng: random.Random, name: str, ttl: float) -> None:
    from django_bgtasks import TaskCancelled

    token = running.token
    steps = rng.randint(1, 6)
    try:
        for step in range(steps):
            # No check() first: a worker resumed from a pause goes straight
            # on with its step, so fence() itself must refuse.
            roll = rng.random()
            if roll < 0.65:
                _journaled_increment(running, journal, rng, name)
            elif roll < 0.82:
                running.update({"by": running.owner, "done": step + 1, "total": steps})
            elif roll < 0.9:
                # Silent work longer than the ttl: only the heartbeat keeps the lease.
                time.sleep(rng.uniform(0.5, 1.4) * ttl)
            elif roll < 0.93:
                journal("body_end", token=token, how="failed")
                raise Boom(f"step {step} failed on purpose")
            else:
                time.sleep(rng.uniform(0, 0.05))
            if rng.random() < 0.5:
                running.check()
        running.check()
    except TaskCancelled:
        journal("body_end", token=token, how="cancelled")
        raise
    journal("body_end", token=token, how="succeeded")


def _journaled_increment(running: Any, journal: Journal, rng: random.Random, name: str) -> None:
    """One fenced read-modify-write of the counter, logged in the ledger, with
    ``try`` journaled just before the commit and ``ok`` after it returned."""
    from django.db import InterfaceError, OperationalError, connection, transaction

    from django_bgtasks import LeaseLost
    from tests.testapp.models import Counter, LedgerEntry

    token = running.token
    while True:
        value = None
        try:
            with transaction.atomic():
                known_lost = running.lost
                # When this fenced write began, on this machine's monotonic
                # clock: the chaos process records its pauses on it too.
                fence_called = time.monotonic()
                try:
                    running.fence()
                except LeaseLost:
                    journal("refused", token=token, by="runner" if known_lost else "database")
                    raise
                began = _db_now()
                row = Counter.objects.select_for_update().get(name=name)
                time.sleep(rng.choice([0, 0, 0.001, 0.005, 0.02]))  # the "work"
                row.value += 1
                row.save(update_fields=["value"])
                LedgerEntry.objects.create(
                    counter=name,
                    owner=running.owner,
                    token=token,
                    value=row.value,
                    began_at=began,
                    ended_at=_db_now(),
                )
                value = row.value
                journal("try", token=token, value=value, fence_called=fence_called)
            journal("ok", token=token, value=value)
            return
        except (OperationalError, InterfaceError) as exc:
            if value is not None:  # the commit itself failed: did it happen?
                journal("err", token=token, value=value, error=str(exc).strip()[:200])
            connection.close()
            running.check()
            time.sleep(0.1)


def _zombie_write(running: Any, journal: Journal, name: str) -> None:
    """After LeaseLost, do what a buggy or paused holder would: skip the
    runner's own check and ask the database to fence with the old token.
    If it says yes the write goes ahead (so a bug shows up in the ledger)."""
    from django.db import InterfaceError, OperationalError, connection, transaction

    from django_bgtasks.models import BackgroundTask

    for _ in range(100):
        try:
            with transaction.atomic():
                fence_called = time.monotonic()
                accepted = BackgroundTask.objects.fence(name, running.owner, running.token)
                if accepted:
                    value = _ledger_increment(name, running.owner, running.token)
                    journal(
                        "try",
                        token=running.token,
                        value=value,
                        fence_called=fence_called,
                        zombie=True,
                    )
            journal("late", token=running.token, accepted=accepted, fence_called=fence_called)
            if accepted:
                journal("ok", token=running.token, value=value, zombie=True)
            return
        except (OperationalError, InterfaceError):
            connection.close()
            time.sleep(0.1)


# --- the partition test's replica --------------------------------------------------


def replica(name: str, ttl_text: str, cut: str) -> None:
    """Hold ``name`` and make fenced increments until the network is cut.

    The test cuts the link after ``idle`` (between two writes: ``cut`` is
    ``between-writes`` or ``check-only``) or after ``fencing`` (inside a
    fenced transaction that has written but not committed: ``inside-fence``),
    then says ``cut``. The body keeps going, retrying its writes (or, for
    ``check-only``, only calling ``check()``), until the runner says LeaseLost.
    After ``healed``, it tries to write with the old token and reports what
    was refused. Times are ``time.monotonic()``, which every network
    namespace shares, so the test can compare them with its own.
    """
    from django.db import InterfaceError, OperationalError, connection, transaction

    from django_bgtasks import LeaseLost, lease
    from django_bgtasks.models import BackgroundTask
    from tests.procs import _fenced_increment
    from tests.testapp.models import Counter

    ttl = float(ttl_text)
    _ready()
    report: dict[str, Any] = {"committed": 0}

    def watch(running: Any) -> None:
        # When does the runner itself call the lease lost, whatever the body
        # is blocked in? ``lost`` is the public view of the renew deadline.
        while not running.lost:
            time.sleep(0.005)
        report["lost_at"] = time.monotonic()

    def increment(running: Any) -> None:
        while True:
            running.check()
            try:
                _fenced_increment(running, name)
                report["committed"] += 1
                return
            except (OperationalError, InterfaceError) as exc:
                report.setdefault("errors", []).append(str(exc).strip()[:200])
                connection.close()
                time.sleep(0.05)

    try:
        with lease(name, ttl=ttl, value={"by": "replica"}) as running:
            report["token"], report["owner"] = running.token, running.owner
            threading.Thread(target=watch, args=(running,), daemon=True).start()
            print(f"held {running.token}", flush=True)
            for _ in range(3):
                increment(running)
                time.sleep(0.05)
            if cut == "inside-fence":
                try:
                    with transaction.atomic():
                        running.fence()
                        # A write that must never commit: the link is cut
                        # before the commit is sent.
                        Counter.objects.filter(name=name).update(value=-1000)
                        print("fencing", flush=True)
                        sys.stdin.readline()  # the link is cut now
                        report["commit_sent_at"] = time.monotonic()
                except (OperationalError, InterfaceError) as exc:
                    report["commit_failed_at"] = time.monotonic()
                    report["commit_error"] = str(exc).strip()[:200]
                    connection.close()
            else:
                print("idle", flush=True)
                sys.stdin.readline()  # the link is cut now
            try:
                if cut == "check-only":
                    # A body that doesn't touch the database: only the
                    # runner's renew deadline can tell it the lease is gone.
                    while True:
                        running.check()
                        time.sleep(0.01)
                while True:
                    increment(running)
                    time.sleep(0.05)
            except LeaseLost:
                # When the body saw it; leaving the with block takes up to a
                # second more, while finish() waits for the stuck heartbeat.
                report["raised_at"] = time.monotonic()
                raise
    except LeaseLost as exc:
        report["exited_at"] = time.monotonic()
        report["reason"] = exc.reason
        # The runner's private deadline, to show the loss was declared by it.
        report["deadline"] = running._deadline
    except (OperationalError, InterfaceError) as exc:  # a failure of the test
        report["reason"] = f"database error escaped the body: {exc}"
    print("lost", flush=True)
    sys.stdin.readline()  # the link is back

    def retry(call: Any) -> Any:
        for _ in range(100):
            try:
                return call()
            except (OperationalError, InterfaceError):
                connection.close()
                time.sleep(0.1)
        raise AssertionError("the database stayed unreachable after the link came back")

    try:
        retry(lambda: _fenced_increment(running, name))
        report["late_fence_by_runner"] = "accepted"
    except LeaseLost:
        report["late_fence_by_runner"] = "refused"

    def db_fence() -> bool:
        with transaction.atomic():
            return BackgroundTask.objects.fence(name, running.owner, running.token)

    objects = BackgroundTask.objects
    owner, token = running.owner, running.token
    report["late_db_fence"] = retry(db_fence)
    report["late_heartbeat"] = retry(lambda: objects.heartbeat(name, owner, token=token))
    report["late_update"] = retry(
        lambda: objects.update_state(name, owner, {"late": True}, token=token)
    )
    report["late_release"] = retry(lambda: objects.release(name, owner, token=token))
    _result(report)


# --- the failover tests' claimants (tests/faults/test_failover.py) -----------------


def claim_and_write(name: str, ttl_text: str, then: str) -> None:
    """On ``go``: claim ``name`` under the runner and make one fenced
    increment of its counter; report the token and the value as soon as that
    commit returned (acknowledged); then ``release`` the lease, or ``hold``
    it (renewed by the runner) until killed."""
    from django.db import transaction

    from django_bgtasks.core.runner import RunningLease

    _ready()
    running = RunningLease.claim(name, ttl=float(ttl_text), value={"by": "claimant"})
    if running is None:
        _result({"claimed": False})
        return
    with transaction.atomic():
        running.fence()
        value = _ledger_increment(name, running.owner, running.token)
    report = {"claimed": True, "token": running.token, "owner": running.owner, "value": value}
    if then == "release":
        running.finish(None)
        _result({**report, "released": True})
        return
    _result(report)
    sys.stdin.readline()  # hold, renewed by the heartbeat thread, until killed


# --- one-shot helpers ------------------------------------------------------------------


def migrate() -> None:
    """Create the tables in a database that no pytest-django alias manages."""
    from django.core.management import call_command

    call_command("migrate", run_syncdb=True, verbosity=0)
    _result({"migrated": True})


def manage(*args: str) -> None:
    """``manage.py <args>`` in a process set up like the workers: how the
    chaos process runs the ``bgtasks`` command, as an operator would."""
    from django.core.management import execute_from_command_line

    execute_from_command_line(["manage.py", *args])


SCENARIOS = {
    "torture": torture,
    "replica": replica,
    "claim_and_write": claim_and_write,
    "standby": standby,
    "migrate": migrate,
    "manage": manage,
}


def _name_connections() -> None:
    # Torture workers name their connections after their pid, so that the
    # chaos process can see in pg_stat_activity what a paused worker left
    # running on the server.
    db = json.loads(os.environ[ENV_DB])
    if "postgresql" in db.get("ENGINE", ""):
        db.setdefault("OPTIONS", {})["application_name"] = f"bgtasks-torture-{os.getpid()}"
        os.environ[ENV_DB] = json.dumps(db)


if __name__ == "__main__":
    if sys.argv[1] == "torture":
        _name_connections()
    _setup_django()
    SCENARIOS[sys.argv[1]](*sys.argv[2:])
