"""The demo: three replicas of one site, one task, one owner, a visible takeover.

``make demo`` runs this. It migrates the example site's database, fills its
log with entries old enough to clean up, then starts three replica processes
(``manage.py demo_replica``). All three try to start ``log-cleanup`` at the
same moment: the lease lets exactly one run it and tells the others who holds
it. While it runs, the replicas read the task's row from the database and the
timeline below shows what they read: owner, token and progress.

Then the demo SIGKILLs the holder, mid-run. Nothing is released; its heartbeat
just stops. Once the lease's ttl has passed since that last heartbeat,
another replica takes the task over with a higher fencing token, the killed
run is recorded in history as lost, and the new holder finishes the job. The
demo ends with a summary, checks the story it tells (exit status 1 if any part
did not happen), and says how to browse the site with ``make serve``.

Options: ``--sqlite`` for SQLite instead of the embedded PostgreSQL
(``DATABASE_URL``, when set, names another server); ``--replicas``; ``--ttl``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import queue
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TASK = "log-cleanup"
OLD_ROWS, RECENT_ROWS, DAYS = 1500, 300, 30
KILL_AFTER = (
    1 / 3
)  # of the rows deleted: late enough to show progress, early enough to show a resume
TIMELINE_LIMIT = 45.0  # seconds; the whole story takes about ten


def say(text: str = "") -> None:
    print(text, flush=True)


@dataclass
class Replica:
    label: str
    process: subprocess.Popen[str]
    killed_at: float | None = None
    done: bool = False

    @property
    def pid(self) -> int:
        return self.process.pid


@dataclass
class Story:
    """What happened, as the replicas reported it."""

    first_tries: dict[str, dict[str, Any]] = field(default_factory=dict)
    winner: str | None = None
    first_token: int | None = None
    killed: str | None = None
    killed_owner: str = ""
    killed_value: Any = None
    kill_time: float | None = None
    takeover: str | None = None
    takeover_token: int | None = None
    takeover_time: float | None = None
    finished: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


class Demo:
    """Runs the replicas, tells what they report, and kills the holder once."""

    def __init__(self, replicas: int, ttl: float) -> None:
        self.count = replicas
        self.ttl = ttl
        self.replicas: dict[str, Replica] = {}
        self.events: queue.Queue[tuple[str, dict[str, Any], float]] = queue.Queue()
        self.story = Story()
        self.t0 = 0.0
        self.last_seen: tuple[Any, ...] = ()
        self.last_seen_at = 0.0

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
        reset_logs(old=OLD_ROWS, recent=RECENT_ROWS, days=DAYS)
        ensure_demo_user()
        say(
            f"setup     migrated; the log has {OLD_ROWS} entries older than {DAYS} days to "
            f"clean up and {RECENT_ROWS} recent ones to keep"
        )
        return state.token if state is not None else 0

    def start_replicas(self, after_token: int) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        for number in range(1, self.count + 1):
            label = f"replica-{number}"
            process = subprocess.Popen(
                [
                    sys.executable,
                    str(HERE / "manage.py"),
                    "demo_replica",
                    "--after-token",
                    str(after_token),
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=env,
            )
            self.replicas[label] = Replica(label, process)
            threading.Thread(target=self._read, args=(label, process), daemon=True).start()
        waiting = set(self.replicas)
        deadline = time.monotonic() + 60
        while waiting:
            label, event, _ = self._next_event(deadline, "the replicas to start")
            if event["event"] == "ready":
                waiting.discard(label)
            elif event["event"] == "exited":  # its traceback is on stderr, above
                status = self.replicas[label].process.wait()
                raise DemoFailed(f"{label} exited with status {status} as it started")
        say(
            "replicas  "
            + ", ".join(f"{r.label} (pid {r.pid})" for r in self.replicas.values())
            + f"; ttl {self.ttl:g} s, a heartbeat every {self.ttl / 3:g} s"
        )
        say()
        say(f"All {self.count} replicas try to start {TASK} at the same moment.")
        say("Each line is what a replica read from the database, or did.")
        say()
        say("   time  who        what")
        for replica in self.replicas.values():
            assert replica.process.stdin is not None
            replica.process.stdin.write("go\n")
            replica.process.stdin.flush()
        self.t0 = time.monotonic()

    def _read(self, label: str, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                event = {"event": "output", "text": line.rstrip()}
            self.events.put((label, event, time.monotonic()))
        self.events.put((label, {"event": "exited"}, time.monotonic()))

    def _next_event(self, deadline: float, waiting_for: str) -> tuple[str, dict[str, Any], float]:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DemoFailed(f"gave up waiting for {waiting_for}")
            try:
                return self.events.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                continue

    # --- the timeline ----------------------------------------------------------------

    def run(self) -> None:
        deadline = self.t0 + TIMELINE_LIMIT
        # The first tries come down separate pipes in any order: gather them
        # all, then tell them winner first.
        first: dict[str, tuple[str, dict[str, Any], float]] = {}
        later: list[tuple[str, dict[str, Any], float]] = []
        while len(first) < self.count:
            label, event, at = self._next_event(deadline, "every replica's first try")
            if event["event"] in ("claimed", "refused") and label not in first:
                first[label] = (label, event, at)
            elif event["event"] == "exited":
                self.handle(label, event, at)
            else:
                later.append((label, event, at))
        for label, event, at in sorted(
            first.values(), key=lambda item: (item[1]["event"] != "claimed", item[2])
        ):
            self.handle(label, event, at)
        for label, event, at in later:
            self.handle(label, event, at)
        while not all(r.done or r.killed_at is not None for r in self.replicas.values()):
            self.handle(*self._next_event(deadline, f"{TASK} to finish"))

    def handle(self, label: str, event: dict[str, Any], at: float) -> None:
        replica = self.replicas[label]
        if replica.killed_at is not None:
            return  # what it said before it died, still in the pipe
        handler = getattr(self, f"on_{event['event']}")
        handler(replica, event, at - self.t0)

    def line(self, at: float, who: str, what: str) -> None:
        say(f"{at:6.2f}s  {who:<9}  {what}")

    def who(self, owner: str | None) -> str:
        """The replica an owner string (``host:pid:random``) belongs to."""
        if owner:
            parts = owner.split(":")
            if len(parts) >= 3 and parts[-2].isdigit():
                pid = int(parts[-2])
                for replica in self.replicas.values():
                    if replica.pid == pid:
                        return replica.label
        return owner or "nobody"

    def on_claimed(self, replica: Replica, event: dict[str, Any], at: float) -> None:
        story, token = self.story, event["token"]
        if story.winner is None:
            story.winner, story.first_token = replica.label, token
            story.first_tries[replica.label] = event
            self.line(at, replica.label, f"claimed {TASK}: token {token}; it runs the task")
            return
        if event.get("took_over"):
            detail = f"took over {TASK}: token {token}, as the lease of {story.killed} expired"
        else:
            detail = f"claimed {TASK} again: token {token}"
        self.line(at, replica.label, detail)
        if story.killed is not None and story.takeover is None:
            story.takeover, story.takeover_token, story.takeover_time = replica.label, token, at
            self.show_lost_run(at)

    def show_lost_run(self, at: float) -> None:
        from django_bgtasks.models import TaskRun

        token = self.story.first_token or 0
        run = TaskRun.objects.for_task(TASK).filter(token=token).first()
        if run is None:
            self.line(at, "history", f"no run recorded for token {token}")
        else:
            self.line(
                at,
                "history",
                f"token {run.token} of {self.who(run.owner)} recorded: {run.outcome}",
            )

    def on_refused(self, replica: Replica, event: dict[str, Any], at: float) -> None:
        self.story.first_tries[replica.label] = event
        self.line(
            at,
            replica.label,
            f"refused: {TASK} is held by {self.who(event['owner'])} (token {event['token']})",
        )

    def on_seen(self, replica: Replica, event: dict[str, Any], at: float) -> None:
        state = event["state"]
        value = state["value"] if isinstance(state["value"], dict) else {}
        key = (state["token"], state["owner"], state["status"], value.get("phase"))
        now = time.monotonic()
        if key == self.last_seen and now - self.last_seen_at < 0.5:
            return
        self.last_seen, self.last_seen_at = key, now
        self.line(at, replica.label, "reads " + self.describe(state))
        self.maybe_kill(state, at)

    def describe(self, state: dict[str, Any]) -> str:
        value = state["value"] if isinstance(state["value"], dict) else {}
        owner = self.who(state["owner"])
        head = f"token {state['token']}  owner {owner:<9}  "
        if state["status"] == "stale":
            return head + (
                f"STALE: no heartbeat for {state['heartbeat_age']:.1f} s (ttl {state['ttl']:g} s);"
                " anyone may take it over"
            )
        if not state["running"]:
            return head + f"finished: {state['outcome']}, {value.get('done', '?')} rows deleted"
        if not value:
            return head + "starting"
        progress = state["progress"]
        bar = "#" * round((progress or 0) * 20)
        counts = f"{value['done']:>4}/{value['total']:<4}" if "total" in value else " " * 9
        return (
            head
            + f"{value.get('phase', ''):<8} [{bar:<20}] {counts} "
            + f" heartbeat {state['heartbeat_age']:.1f} s ago"
        )

    def maybe_kill(self, state: dict[str, Any], at: float) -> None:
        story = self.story
        value = state["value"] if isinstance(state["value"], dict) else {}
        if (
            story.killed is None
            and state["token"] == story.first_token
            and state["running"]
            and value.get("total")
            and value.get("done", 0) >= value["total"] * KILL_AFTER
        ):
            holder = self.replicas[story.winner or ""]
            holder.process.kill()  # SIGKILL: no release, no last words
            holder.process.wait()
            holder.killed_at = at
            story.killed, story.killed_owner = holder.label, state["owner"]
            story.killed_value, story.kill_time = value, at
            self.line(
                at,
                "demo",
                f"SIGKILL {holder.label} (pid {holder.pid}), the holder, after "
                f"{value['done']} of {value['total']} rows: its heartbeat stops",
            )

    def on_finished(self, replica: Replica, event: dict[str, Any], at: float) -> None:
        self.story.finished.append((replica.label, event))
        if event["error"]:
            self.line(
                at, replica.label, f"its run (token {event['token']}) failed: {event['error']}"
            )
        else:
            result = event["result"] or {}
            self.line(
                at,
                replica.label,
                f"finished its run (token {event['token']}): deleted {result.get('deleted')} rows",
            )

    def on_done(self, replica: Replica, event: dict[str, Any], at: float) -> None:
        replica.done = True

    def on_output(self, replica: Replica, event: dict[str, Any], at: float) -> None:
        self.line(at, replica.label, event["text"])

    def on_exited(self, replica: Replica, event: dict[str, Any], at: float) -> None:
        if not replica.done:
            raise DemoFailed(
                f"{replica.label} exited unexpectedly (status {replica.process.wait()})"
            )

    def stop(self) -> None:
        for replica in self.replicas.values():
            if replica.process.poll() is None:
                replica.process.terminate()
        for replica in self.replicas.values():
            try:
                replica.process.wait(5)
            except subprocess.TimeoutExpired:
                replica.process.kill()
                replica.process.wait()

    # --- the summary -------------------------------------------------------------------

    def summary(self, after_token: int) -> list[str]:
        """Print the summary; return what went wrong (nothing, if the story held)."""
        from django.utils import timezone

        from demo_site.models import LogEntry
        from django_bgtasks.models import TaskRun

        story, problems = self.story, []
        others = sorted(set(self.replicas) - {story.winner or ""})
        refused = sorted(
            label
            for label, event in story.first_tries.items()
            if event["event"] == "refused" and self.who(event["owner"]) == story.winner
        )
        winners = [label for label, e in story.first_tries.items() if e["event"] == "claimed"]
        if len(winners) != 1 or sorted(refused) != others:
            problems.append(f"first tries: {story.first_tries}")
        runs = list(TaskRun.objects.for_task(TASK).filter(token__gt=after_token).order_by("token"))
        by_token = {run.token: run for run in runs}
        lost = by_token.get(story.first_token or -1)
        new = by_token.get(story.takeover_token or -1)
        if story.killed is None:
            problems.append("the holder was never killed")
        if story.takeover is None or story.takeover == story.killed:
            problems.append("no other replica took over")
        if lost is None or lost.outcome != "lost" or lost.owner != story.killed_owner:
            problems.append(f"the killed run is not in history as lost: {lost!r}")
        if new is None or new.outcome != "succeeded":
            problems.append(f"the takeover run did not succeed: {new!r}")
        cutoff = timezone.now() - dt.timedelta(days=DAYS)
        old_left = LogEntry.objects.filter(created_at__lt=cutoff).count()
        recent_left = LogEntry.objects.filter(created_at__gte=cutoff).count()
        if (old_left, recent_left) != (0, RECENT_ROWS):
            problems.append(f"log: {old_left} old and {recent_left} recent entries left")

        say()
        say("Summary")
        say(
            f"  first claim  {story.winner} won with token {story.first_token}; "
            f"refused: {', '.join(refused) or 'none'} (held by {story.winner})"
        )
        if story.killed is not None and story.kill_time is not None:
            value = story.killed_value or {}
            say(
                f"  killed       {story.killed} with SIGKILL at {story.kill_time:.2f} s, mid-run "
                f"(it had reported {value.get('done')} of {value.get('total')} rows)"
            )
        if story.takeover is not None and story.takeover_time is not None:
            higher = ">" if (story.takeover_token or 0) > (story.first_token or 0) else "NOT >"
            say(
                f"  takeover     {story.takeover} with token {story.takeover_token} "
                f"({higher} {story.first_token}) at {story.takeover_time:.2f} s"
            )
            if (story.takeover_token or 0) <= (story.first_token or 0):
                problems.append("the takeover token is not higher")
        if lost is not None and new is not None and lost.finished_at and new.started_at:
            silent = (new.started_at - lost.finished_at).total_seconds()
            after_kill = (story.takeover_time or 0) - (story.kill_time or 0)
            say(
                f"  delay        {silent:.2f} s from the last heartbeat to the takeover, by the "
                f"database's clock (ttl {self.ttl:g} s); {after_kill:.2f} s after the kill"
            )
            if silent < self.ttl:
                problems.append(f"taken over {silent:.2f} s after the last heartbeat < ttl")
        for index, run in enumerate(runs):
            value = run.value if isinstance(run.value, dict) else {}
            say(
                f"  {'history' if index == 0 else '':<11}  token {run.token}  "
                f"{self.who(run.owner):<9}  {run.outcome:<9}  "
                f"{value.get('done')} of {value.get('total')} rows"
            )
        say(
            f"  log          {OLD_ROWS - old_left} of {OLD_ROWS} old entries deleted, "
            f"{old_left} left; {recent_left} of {RECENT_ROWS} recent ones kept"
        )
        return problems


class DemoFailed(Exception):
    pass


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
    parser.add_argument("--replicas", type=int, default=3, help="how many (default: 3)")
    parser.add_argument("--ttl", type=float, default=3.0, help="lease ttl, s (default: 3)")
    args = parser.parse_args(argv)
    if args.replicas < 2:
        parser.error("--replicas must be at least 2: one to kill, one to take over")
    if not 0.1 <= args.ttl <= 10:
        # The story waits one ttl for the takeover, within TIMELINE_LIMIT; 0.1 s
        # is the shortest lease django-bgtasks accepts (validation.MIN_TTL).
        parser.error("--ttl must be above 0: from 0.1 to 10 seconds")
    if args.sqlite:
        os.environ["BGTASKS_DEMO_DB"] = "sqlite"
    os.environ["BGTASKS_DEMO_TTL"] = str(args.ttl)

    began = time.monotonic()
    say(f"django-bgtasks demo: {args.replicas} replicas of one site, one task, one owner.")
    say()
    # Starts the embedded PostgreSQL when that is the database. This process
    # keeps the handle (the server stops when it exits), so it must outlive
    # the replicas, which it does.
    setup_django()
    demo = Demo(args.replicas, args.ttl)
    try:
        after_token = demo.setup()
        demo.start_replicas(after_token)
        demo.run()
    except DemoFailed as exc:
        say(f"\nThe demo failed: {exc}")
        return 1
    finally:
        demo.stop()
    problems = demo.summary(after_token)
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
