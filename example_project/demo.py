"""The demo: three ``bgtasks worker`` processes, a requested task, a worker
killed mid-run, and another worker resuming the run from its checkpoint.

``make demo`` runs this. It migrates the example site's database and fills its
log with entries old enough to clean up. Then it starts three real workers,
``manage.py bgtasks worker --task log-cleanup``, as three hosts would run
them, and requests one run of ``log-cleanup`` with ``request_run()`` (what
``manage.py bgtasks request`` and ``task.request()`` call): exactly one
worker claims it. While it runs, the demo reads the
task's row from the database, as any replica would, and the timeline shows
what it read (owner, token, progress) beside what the workers logged.

Then the demo SIGKILLs the worker that runs it, mid-run. Nothing is released;
its heartbeat just stops. Once the lease's ttl has passed since that last
heartbeat, another worker claims the run again with a higher fencing token and
resumes it from its last checkpoint (``lease.resume_from``), while history
records the killed run as lost. The demo stops the other workers with SIGTERM,
as a deploy would, ends with a summary, checks the story it tells (exit status
1 if any part did not happen), and says how to browse the site with
``make serve``.

Options: ``--sqlite`` for SQLite instead of the embedded PostgreSQL
(``DATABASE_URL``, when set, names another server); ``--workers``; ``--ttl``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MANAGE = [sys.executable, str(HERE / "manage.py")]
TASK = "log-cleanup"
OLD_ROWS, RECENT_ROWS, DAYS = 1500, 300, 30
# Of the rows to delete: late enough to show progress, early enough to show a resume.
KILL_AFTER = 1 / 3
POLL = 0.2  # the workers' --poll, seconds
READ_EVERY = 0.1  # how often the demo reads the task's row
SHOW_EVERY = 0.5  # an unchanged reading is shown at most this often
START_LIMIT = 60.0  # seconds for the workers to start
TIMELINE_LIMIT = 45.0  # seconds; the whole story takes about ten
WORKER_COMMAND = ["bgtasks", "worker", "--task", TASK, "--poll", f"{POLL:g}"]

# What the workers log (demo_site/settings.py's LOGGING):
# "2026-01-02 03:04:05,678 INFO django_bgtasks.worker: ..." (the timeline has its own times).
LOG_LINE = re.compile(
    r"^(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} )?"
    r"(DEBUG|INFO|WARNING|ERROR|CRITICAL) (django_bgtasks[\w.]*): (.*)$"
)
STARTED = re.compile(r"^task '[^']+' started \(token (\d+), (\w+), attempt (\d+)\)$")


def say(text: str = "") -> None:
    print(text, flush=True)


def command_line(args: list[str]) -> str:
    return "manage.py " + " ".join(args)


@dataclass
class WorkerProcess:
    label: str
    process: subprocess.Popen[str]
    output_ended: bool = False
    killed_at: float | None = None
    terminated: bool = False

    @property
    def pid(self) -> int:
        return self.process.pid


@dataclass
class Claim:
    """A "task ... started" line of a worker's log."""

    label: str
    token: int
    trigger: str
    attempt: int
    at: float


@dataclass
class Story:
    """What happened, as the workers logged it and the database said it."""

    claims: list[Claim] = field(default_factory=list)
    first_token: int | None = None
    holder: str | None = None
    killed_owner: str = ""
    killed_value: dict[str, Any] = field(default_factory=dict)
    kill_time: float | None = None
    resume_token: int | None = None
    resumer: str | None = None
    resume_time: float | None = None
    end_time: float | None = None
    exit_status: dict[str, int | None] = field(default_factory=dict)


class Demo:
    """Runs the workers, tells what they do, and kills the holder once."""

    def __init__(self, workers: int, ttl: float) -> None:
        self.count = workers
        self.ttl = ttl
        self.workers: dict[str, WorkerProcess] = {}
        self.events: queue.Queue[tuple[float, str, str, str]] = queue.Queue()
        self.story = Story()
        self.t0 = 0.0
        self.after_token = 0
        self.last_shown: tuple[Any, ...] = ()
        self.last_shown_at = 0.0

    # --- setting up ----------------------------------------------------------------

    def setup(self) -> int:
        """Migrate and seed; returns the task's token before the demo (0 if never run)."""
        from django.core.management import call_command
        from django.db import connection

        from demo_site import database
        from demo_site.demo_data import ensure_demo_user, reset_logs
        from django_bgtasks.models import BackgroundTask

        say(f"database  {database.describe(connection.settings_dict)}")
        call_command("migrate", verbosity=0)
        state = BackgroundTask.objects.get_state(TASK)
        if state is not None and state.running:
            raise DemoFailed(
                f"{TASK} is running right now, held by {state.owner} (another demo, or "
                "`make serve`?). Let it finish, or stop that process, and try again."
            )
        for worker in BackgroundTask.objects.work.workers():
            if TASK in worker.tasks and _alive(worker.host, worker.pid, worker.age):
                raise DemoFailed(
                    f"a bgtasks worker for {TASK} is running against this database (pid "
                    f"{worker.pid} on {worker.host}); it would join the demo. Stop it, and "
                    "try again."
                )
        if state is not None and (
            state.stale or state.outcome in ("lost", "interrupted") or state.requested_at
        ):
            # An earlier demo was stopped part way: the workers would first
            # resume (or perform) what it left, and tell another story.
            if state.stale:
                BackgroundTask.objects.expire_stale(TASK, token=state.token)
            BackgroundTask.objects.filter(name=TASK, token=state.token, running=False).delete()
            say(f"setup     cleared what an earlier, interrupted demo left of {TASK}")
        reset_logs(old=OLD_ROWS, recent=RECENT_ROWS, days=DAYS)
        ensure_demo_user()
        say(
            f"setup     migrated; the log has {OLD_ROWS} entries older than {DAYS} days to "
            f"clean up and {RECENT_ROWS} recent ones to keep"
        )
        self.after_token = state.token if state is not None else 0
        return self.after_token

    def start_workers(self) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        # Every process first, then the threads that read them (see _die_with_parent).
        for number in range(1, self.count + 1):
            label = f"worker-{number}"
            process = subprocess.Popen(
                [*MANAGE, *WORKER_COMMAND],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
                preexec_fn=_die_with_parent,
            )
            self.workers[label] = WorkerProcess(label, process)
        for label, worker in self.workers.items():
            threading.Thread(target=self._read, args=(label, worker.process), daemon=True).start()
        self._wait_until_polling()
        say(
            "workers   "
            + ", ".join(f"{w.label} (pid {w.pid})" for w in self.workers.values())
            + f", each running `{command_line(WORKER_COMMAND)}`"
        )
        say(f"          ttl {self.ttl:g} s, a heartbeat every {self.ttl / 3:g} s")
        say()
        say(f"The demo requests {TASK} once; exactly one worker claims it. Each line is")
        say("what a worker logged, what the demo read from the task's lease row, or did.")
        say()
        say("   time  who        what")

    def _wait_until_polling(self) -> None:
        """Until every worker has reported itself in the workers' table."""
        from django_bgtasks.core.leases import host_name
        from django_bgtasks.models import BackgroundTask

        deadline = time.monotonic() + START_LIMIT
        host = host_name()
        pids = {worker.pid for worker in self.workers.values()}
        while True:
            reported = {w.pid for w in BackgroundTask.objects.work.workers() if w.host == host}
            if pids <= reported:
                return
            for worker in self.workers.values():
                if worker.process.poll() is not None:
                    self._drain(0.5, show=lambda label, text: say(f"  {label}: {text}"))
                    raise DemoFailed(
                        f"{worker.label} exited with status {worker.process.returncode} as "
                        "it started (its output is above)"
                    )
            if time.monotonic() > deadline:
                raise DemoFailed("gave up waiting for the workers to start")
            self._drain(0.1, show=self._startup_line)

    def _startup_line(self, label: str, text: str) -> None:
        match = LOG_LINE.match(text)
        if match is None or match[1] != "INFO":  # a worker's banner is not news
            say(f"  {label}: {text}")

    def _read(self, label: str, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            self.events.put((time.monotonic(), label, "line", line.rstrip()))
        self.events.put((time.monotonic(), label, "eof", ""))

    def _drain(self, seconds: float, show: Callable[[str, str], None]) -> None:
        """Show what comes in for ``seconds``, with ``show`` for output lines."""
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                _, label, kind, text = self.events.get(timeout=remaining)
            except queue.Empty:
                return
            if kind == "line":
                show(label, text)
            elif kind == "eof" and label in self.workers:
                self.workers[label].output_ended = True

    # --- the timeline ----------------------------------------------------------------

    def request(self) -> None:
        """Request one run, as a site's code would (``log_cleanup.request()`` does the same)."""
        from django_bgtasks.models import BackgroundTask

        self.t0 = time.monotonic()
        accepted = BackgroundTask.objects.request_run(TASK, requested_by="demo")
        self.line(
            time.monotonic() - self.t0,
            "demo",
            f"BackgroundTask.objects.request_run({TASK!r}) -> {accepted}: "
            + ("a worker will run it" if accepted else "a request is already pending"),
        )
        if not accepted:
            raise DemoFailed(f"the request was refused: {TASK} already has a pending request")

    def run(self) -> None:
        """Until the resumed run has ended (or the story can't go on)."""
        deadline = self.t0 + TIMELINE_LIMIT
        next_read = time.monotonic()
        while self.story.end_time is None:
            now = time.monotonic()
            if now > deadline:
                raise DemoFailed(f"gave up waiting for {TASK} to finish")
            if now >= next_read:
                self.read_row()
                next_read = now + READ_EVERY
                continue
            try:
                at, label, kind, text = self.events.get(timeout=next_read - now)
            except queue.Empty:
                continue
            self.handle(at, label, kind, text)

    def handle(self, at: float, label: str, kind: str, text: str) -> None:
        at -= self.t0
        worker = self.workers[label]
        if kind == "eof":
            worker.output_ended = True
            if worker.killed_at is None and not worker.terminated:
                raise DemoFailed(f"{label} exited unexpectedly (status {worker.process.wait()})")
            return
        if worker.killed_at is not None:
            return  # what it said before it died, still in the pipe
        self.worker_line(at, worker, text)

    def worker_line(self, at: float, worker: WorkerProcess, text: str) -> None:
        match = LOG_LINE.match(text)
        if match is None:  # a traceback, say: show it as it is
            self.line(at, worker.label, text)
            return
        level, message = match[1], re.sub(r"^worker \S+: ", "", match[3])
        started = STARTED.match(message)
        if started:
            token, trigger, attempt = int(started[1]), started[2], int(started[3])
            self.story.claims.append(Claim(worker.label, token, trigger, attempt, at))
        self.line(at, worker.label, message if level == "INFO" else f"{level}: {message}")

    def read_row(self) -> None:
        """Read the task's row, as any replica would, and act on what it says."""
        from django_bgtasks.models import BackgroundTask

        state = BackgroundTask.objects.get_state(TASK)
        at = time.monotonic() - self.t0
        if state is None or state.token <= self.after_token:
            return  # not claimed yet
        story = self.story
        value = state.value if isinstance(state.value, dict) else {}
        if story.first_token is None:
            story.first_token, story.holder = state.token, self.who(state.owner)
        self.show_row(state, at)
        if story.kill_time is None:
            if state.token != story.first_token or not state.running:
                raise DemoFailed(
                    f"{TASK} ended (token {state.token}: {state.outcome or state.status}) "
                    "before the demo could kill its worker"
                )
            if value.get("total") and value.get("done", 0) >= value["total"] * KILL_AFTER:
                self.kill_holder(state.owner, value, at)
        elif story.resume_token is None and state.token > (story.first_token or 0):
            story.resume_token, story.resumer, story.resume_time = (
                state.token,
                self.who(state.owner),
                at,
            )
            self.show_lost_run(at)
        if (
            story.resume_token is not None
            and state.token == story.resume_token
            and not state.running
            and state.outcome
        ):
            story.end_time = at

    def show_row(self, state: Any, at: float) -> None:
        value = state.value if isinstance(state.value, dict) else {}
        key = (state.token, state.owner, str(state.status), value.get("phase"))
        now = time.monotonic()
        if key == self.last_shown and now - self.last_shown_at < SHOW_EVERY:
            return
        self.last_shown, self.last_shown_at = key, now
        self.line(at, "lease row", self.describe(state))

    def describe(self, state: Any) -> str:
        value = state.value if isinstance(state.value, dict) else {}
        head = f"token {state.token}  {self.who(state.owner):<8}  "
        if state.stale:
            return head + (
                f"STALE: no heartbeat for {state.heartbeat_age:.1f} s (ttl {state.ttl:g} s); "
                "a worker may claim it again"
            )
        if not state.running:
            return head + f"{state.outcome}: {value.get('done')} of {value.get('total')} rows"
        if "total" not in value:
            return head + f"{state.trigger}, attempt {state.attempt}: starting"
        bar = "#" * round((state.progress or 0) * 20)
        since = f", resumed from {value['from']}" if value.get("from") else ""
        return (
            head
            + f"{value.get('phase', ''):<8} [{bar:<20}] {value['done']:>4}/{value['total']:<4}"
            + f"  heartbeat {state.heartbeat_age:.1f} s ago{since}"
        )

    def kill_holder(self, owner: str, value: dict[str, Any], at: float) -> None:
        story = self.story
        holder = self.workers.get(self.who(owner))
        if holder is None:
            raise DemoFailed(f"{TASK} is held by {owner}, which is none of the demo's workers")
        holder.process.kill()  # SIGKILL: no release, no last words
        holder.process.wait()
        holder.killed_at = at
        story.killed_owner, story.killed_value, story.kill_time = owner, value, at
        self.line(
            at,
            "demo",
            f"SIGKILL {holder.label} (pid {holder.pid}), the holder, after {value['done']} "
            f"of {value['total']} rows: its heartbeat stops",
        )

    def show_lost_run(self, at: float) -> None:
        from django_bgtasks.models import TaskRun

        token = self.story.first_token
        run = TaskRun.objects.for_task(TASK).filter(token=token).first()
        if run is None:
            self.line(at, "history", f"no run recorded for token {token}")
            return
        value = run.value if isinstance(run.value, dict) else {}
        self.line(
            at,
            "history",
            f"token {run.token} of {self.who(run.owner)} recorded: {run.outcome}, its last "
            f"checkpoint {value.get('done')} of {value.get('total')} rows",
        )

    def stop_the_others(self) -> None:
        """SIGTERM the workers still running, as a deploy would, and wait for them."""
        alive = [w for w in self.workers.values() if w.killed_at is None]
        at = time.monotonic() - self.t0
        self.line(
            at,
            "demo",
            f"SIGTERM {', '.join(w.label for w in alive)}: a graceful stop, as a deploy does",
        )
        for worker in alive:
            worker.terminated = True
            worker.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 40
        while not all(w.output_ended for w in alive) and time.monotonic() < deadline:
            try:
                event = self.events.get(timeout=0.5)
            except queue.Empty:
                continue
            self.handle(*event)
        for worker in self.workers.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                worker.process.wait(5)
            self.story.exit_status[worker.label] = worker.process.poll()

    def line(self, at: float, who: str, what: str) -> None:
        say(f"{at:6.2f}s  {who:<9}  {what}")

    def who(self, owner: str | None) -> str:
        """The worker an owner string (``host:pid:random``) belongs to."""
        if owner:
            parts = owner.split(":")
            if len(parts) >= 3 and parts[-2].isdigit():
                pid = int(parts[-2])
                for worker in self.workers.values():
                    if worker.pid == pid:
                        return worker.label
        return owner or "nobody"

    def stop(self) -> None:
        for worker in self.workers.values():
            if worker.process.poll() is None:
                worker.terminated = True
                worker.process.terminate()
        for worker in self.workers.values():
            try:
                worker.process.wait(10)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()

    # --- the summary -------------------------------------------------------------------

    def summary(self) -> list[str]:
        """Print the summary; return what went wrong (nothing, if the story held)."""
        from django.utils import timezone

        from demo_site.models import LogEntry
        from django_bgtasks import get_task
        from django_bgtasks.models import BackgroundTask, TaskRun

        story, problems = self.story, []
        task = get_task(TASK)
        runs = list(
            TaskRun.objects.for_task(TASK).filter(token__gt=self.after_token).order_by("token")
        )
        by_token = {run.token: run for run in runs}
        lost = by_token.get(story.first_token or -1)
        resumed = by_token.get(story.resume_token or -1)
        lost_value = lost.value if lost is not None and isinstance(lost.value, dict) else {}
        resumed_value = (
            resumed.value if resumed is not None and isinstance(resumed.value, dict) else {}
        )
        requests = [c for c in story.claims if c.trigger == "request"]
        resumes = [c for c in story.claims if c.trigger == "resume"]

        if [(c.label, c.token) for c in requests] != [(story.holder, story.first_token)]:
            problems.append(f"not exactly one worker claimed the request: {requests}")
        if story.holder not in self.workers:
            problems.append(f"{TASK} was claimed by {story.holder}, none of the demo's workers")
        if story.kill_time is None:
            problems.append("the holder was never killed")
        if (
            len(resumes) != 1
            or resumes[0].label == story.holder
            or resumes[0].token != story.resume_token
        ):
            problems.append(f"not exactly one other worker resumed the run: {resumes}")
        if lost is None or (lost.outcome, lost.owner) != ("lost", story.killed_owner):
            problems.append(f"the killed run is not in history as lost: {lost!r}")
        if resumed is None or (resumed.outcome, resumed.trigger) != ("succeeded", "resume"):
            problems.append(f"the resumed run did not succeed: {resumed!r}")
        if len(runs) != 2:
            problems.append(f"{len(runs)} runs in history, not 2: {runs}")
        if (story.resume_token or 0) <= (story.first_token or 0):
            problems.append("the resumed run's token is not higher")
        if lost_value.get("done", -1) < story.killed_value.get("done", 0):
            problems.append(
                f"the lost run's last checkpoint {lost_value} is behind what the demo read "
                f"before the kill ({story.killed_value})"
            )
        start = resumed_value.get("from")
        if not start or start != lost_value.get("done"):
            problems.append(
                f"the resumed run started from {start!r}, not from the lost run's last "
                f"checkpoint ({lost_value.get('done')!r})"
            )
        if resumed_value.get("done") != resumed_value.get("total"):
            problems.append(f"the resumed run stopped at {resumed_value}")
        # The killed worker's token is fenced off: its late write is refused.
        fenced = not BackgroundTask.objects.update_state(
            TASK, story.killed_owner or "-", {"late": True}, token=story.first_token
        )
        if not fenced:
            problems.append("a write with the killed worker's token was accepted")
        cutoff = timezone.now() - dt.timedelta(days=DAYS)
        old_left = LogEntry.objects.filter(created_at__lt=cutoff).count()
        recent_left = LogEntry.objects.filter(created_at__gte=cutoff).count()
        if (old_left, recent_left) != (0, RECENT_ROWS):
            problems.append(f"log: {old_left} old and {recent_left} recent entries left")
        stopped = {
            label: status for label, status in story.exit_status.items() if label != story.holder
        }
        if any(status != 0 for status in stopped.values()):
            problems.append(f"the other workers did not stop cleanly on SIGTERM: {stopped}")

        say()
        say("Summary")
        say(
            f"  request      accepted (request_run); claimed by {story.holder} alone, with "
            f"token {story.first_token}"
        )
        if story.kill_time is not None:
            say(
                f"  killed       {story.holder} with SIGKILL at {story.kill_time:.2f} s, mid-run, "
                f"after {lost_value.get('done')} of {lost_value.get('total')} rows (its last "
                "checkpoint)"
            )
        if resumed is not None and story.resume_time is not None:
            higher = ">" if (story.resume_token or 0) > (story.first_token or 0) else "NOT >"
            say(
                f"  resumed      by {story.resumer} with token {story.resume_token} ({higher} "
                f"{story.first_token}), attempt {resumed.attempt} of {task.max_attempts}, "
                f"from row {start} of {resumed_value.get('total')} (lease.resume_from)"
            )
        if lost is not None and resumed is not None and lost.finished_at and resumed.started_at:
            silent = (resumed.started_at - lost.finished_at).total_seconds()
            after_kill = (story.resume_time or 0) - (story.kill_time or 0)
            say(
                f"  delay        {silent:.2f} s from the last heartbeat to the resume, by the "
                f"database's clock (ttl {self.ttl:g} s); {after_kill:.2f} s after the kill"
            )
            if silent < self.ttl:
                problems.append(f"resumed {silent:.2f} s after the last heartbeat < ttl")
        say(
            f"  fencing      a write with the killed worker's token {story.first_token} is "
            + ("refused" if fenced else "ACCEPTED")
        )
        width = max((len(str(run.token)) for run in runs), default=1)
        for index, run in enumerate(runs):
            value = run.value if isinstance(run.value, dict) else {}
            since = f", from {value['from']}" if value.get("from") else ""
            say(
                f"  {'history' if index == 0 else '':<11}  token {run.token:<{width}}  "
                f"{self.who(run.owner):<8}  {run.trigger:<7}  attempt {run.attempt}  "
                f"{run.outcome:<9}  {value.get('done')} of {value.get('total')} rows{since}"
            )
        say(
            f"  log          {OLD_ROWS - old_left} of {OLD_ROWS} old entries deleted, "
            f"{old_left} left; {recent_left} of {RECENT_ROWS} recent ones kept"
        )
        statuses = ", ".join(f"{label} {status}" for label, status in stopped.items())
        say(f"  stopped      on SIGTERM, exit status: {statuses}")
        listed = {
            self.who(worker.id): worker
            for worker in BackgroundTask.objects.work.workers()
            if self.who(worker.id) in self.workers
        }
        if set(listed) & set(stopped):
            problems.append(f"stopped workers still listed: {sorted(set(listed) & set(stopped))}")
        killed = listed.get(story.holder or "")
        if killed is not None:
            say(
                f"  workers      `bgtasks workers` still lists {story.holder}, last heard from "
                f"{killed.age:.1f} s ago: killed, it could not remove its row"
            )
        return problems


class DemoFailed(Exception):
    pass


def _alive(host: str, pid: int, age: float) -> bool:
    """Whether a worker that reported itself is still there: by its pid on
    this host, by its heartbeat's age (the workers beat every 5 s) elsewhere."""
    from django_bgtasks.core.leases import host_name

    if host != host_name():
        return age < 15
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


if sys.platform.startswith("linux"):
    import ctypes

    _prctl = ctypes.CDLL(None, use_errno=True).prctl
else:
    _prctl = None


def _die_with_parent() -> None:
    """In a worker, before exec: on Linux, ask for SIGTERM when the demo dies,
    however it dies, so that no worker outlives it. (It runs between fork and
    exec, which is why the demo starts every worker before any thread of its own.)"""
    if _prctl is not None:
        _prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def setup_django() -> None:
    sys.path[:0] = [str(HERE), str(HERE.parent)]
    os.environ["DJANGO_SETTINGS_MODULE"] = "demo_site.settings"
    import django

    django.setup()


def browse_hint() -> None:
    from demo_site.demo_data import DEMO_PASSWORD, DEMO_USERNAME

    prefix = "BGTASKS_DEMO_DB=sqlite " if os.environ.get("BGTASKS_DEMO_DB") == "sqlite" else ""
    say()
    say(f"Next, browse it: `{prefix}make serve` runs two replicas of this site against")
    say("this same database, on http://127.0.0.1:8001/ and http://127.0.0.1:8002/.")
    say("Open both, start a task on one and watch it on the other; the admin is at /admin/.")
    say(f"Log in as {DEMO_USERNAME} / {DEMO_PASSWORD} (a local demo account made by this demo).")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sqlite", action="store_true", help="use SQLite, the lightest start")
    parser.add_argument("--workers", type=int, default=3, help="how many (default: 3)")
    parser.add_argument("--ttl", type=float, default=3.0, help="lease ttl, s (default: 3)")
    args = parser.parse_args(argv)
    if args.workers < 2:
        parser.error("--workers must be at least 2: one to kill, one to resume")
    if not 0.1 <= args.ttl <= 10:
        # The story waits one ttl for the resume, within TIMELINE_LIMIT; 0.1 s
        # is the shortest lease django-bgtasks accepts (limits.MIN_TTL).
        parser.error("--ttl must be above 0: from 0.1 to 10 seconds")
    if args.sqlite:
        os.environ["BGTASKS_DEMO_DB"] = "sqlite"
    os.environ["BGTASKS_DEMO_TTL"] = str(args.ttl)

    began = time.monotonic()
    say(f"django-bgtasks demo: {args.workers} workers, one requested task, a kill and a resume.")
    say()
    # Starts the embedded PostgreSQL when that is the database. This process
    # keeps the handle (the server stops when it exits), so it must outlive
    # the workers, which it does.
    setup_django()
    demo = Demo(args.workers, args.ttl)
    try:
        demo.setup()
        demo.start_workers()
        demo.request()
        demo.run()
        demo.stop_the_others()
    except DemoFailed as exc:
        say(f"\nThe demo failed: {exc}")
        return 1
    except KeyboardInterrupt:
        say("\nInterrupted.")
        return 130
    finally:
        demo.stop()
    problems = demo.summary()
    if problems:
        say("\nThe demo did not go as it should:")
        for problem in problems:
            say(f"  - {problem}")
        return 1
    say(f"\nDone in {time.monotonic() - began:.1f} s.")
    browse_hint()
    return 0


if __name__ == "__main__":
    sys.exit(main())
