"""What the ``bgtasks`` read subcommands print (management/reads.py), on the
surfaces' engines: ``list``'s table (registered tasks that never ran too),
``show``'s fields (only what is true of the task now), its result, value
and recent runs, a Django Task's page, the queues' table, and ``watch``'s
table each interval, stopping cleanly on SIGINT and SIGTERM in a real
process. (``--json`` and the errors are the command's:
tests/management/test_bgtasks.py.)"""

from __future__ import annotations

import datetime as dt
import json
import re
import signal
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.core.management.base import OutputWrapper
from django.core.management.color import no_style

from django_bgtasks.management import reads
from django_bgtasks.models import BackgroundTask
from django_bgtasks.operations import display
from django_bgtasks.operations.queued import Counted
from django_bgtasks.operations.queues import Queue
from tests.dbtools import backdate, rows
from tests.management.test_bgtasks import bgtasks, manage, read_until

objects = BackgroundTask.objects


def test_list_shows_every_task(site_alias: str) -> None:
    objects.try_claim("cleanup", "worker-1", {"done": 9, "total": 20}, ttl=30)
    objects.try_claim("silent", "worker-2", ttl=30)
    backdate(site_alias, "silent", 40)

    out = bgtasks("list").splitlines()

    assert out[0].split() == ["NAME", "STATUS", "PROGRESS", "OWNER", "TOKEN", "OUTCOME",
                              "HEARTBEAT", "STARTED", "FINISHED", "DURATION",
                              "NEXT", "RUN"]  # fmt: skip
    cleanup = next(line for line in out if line.startswith("cleanup"))
    assert "running" in cleanup and "45% (9/20)" in cleanup and "worker-1" in cleanup
    silent = next(line for line in out if line.startswith("silent"))
    assert "stale: holder silent for 4" in silent
    # Registered tasks that have never run are named too.
    assert any(
        line.startswith("Registered, never run: ") and "surface-quick" in line for line in out
    )


def test_list_shows_registered_tasks_that_never_ran_as_rows(site_alias: str) -> None:
    out = bgtasks("list").splitlines()
    quick = next(line for line in out if line.startswith("surface-quick"))
    assert quick.split()[:4] == ["surface-quick", "never", "run", "0"]


def test_show_prints_a_registered_task_that_never_ran(site_alias: str) -> None:
    out = bgtasks("show", "surface-quick")
    assert "status            never run" in out and "token             0" in out
    assert "recent runs" not in out
    data = json.loads(bgtasks("show", "surface-quick", "--json"))
    assert (data["status"], data["token"], data["description"]) == (
        "never run",
        0,
        "Counts to three, reporting each step.",
    )
    assert rows(site_alias) == []  # reading wrote nothing
    # Nothing to release or cancel, as for any task that is not running.
    with pytest.raises(CommandError, match="not held; there is nothing to release"):
        bgtasks("release", "surface-quick", "--force")
    with pytest.raises(CommandError, match="not running; there is nothing to cancel"):
        bgtasks("cancel", "surface-quick")


def test_show_prints_the_result_or_why_it_was_not_stored(site_alias: str) -> None:
    lease = objects.try_claim("cleanup", "worker-1", ttl=30)
    objects.release("cleanup", "worker-1", token=lease.token, result={"deleted": 12})
    out = bgtasks("show", "cleanup")
    assert 'result:\n{\n  "deleted": 12\n}' in out
    lease = objects.try_claim("cleanup", "worker-1", ttl=30)
    objects.release("cleanup", "worker-1", token=lease.token, result={1, 2})
    out = bgtasks("show", "cleanup")
    assert "result: not stored: TypeError: result is not JSON-serialisable" in out
    data = json.loads(bgtasks("show", "cleanup", "--json"))
    assert data["result"] is None and data["result_note"].startswith("not stored: TypeError")


def test_show_prints_the_state_value_and_recent_runs(site_alias: str) -> None:
    for _ in range(2):
        lease = objects.try_claim("cleanup", "worker-1", ttl=30)
        objects.release("cleanup", "worker-1", {"deleted": 5}, token=lease.token)
    objects.try_claim("cleanup", "worker-2", {"done": 1, "total": 2, "phase": "scan"}, ttl=30)

    out = bgtasks("show", "cleanup")

    assert "status            running" in out
    assert "owner             worker-2" in out and "token             3" in out
    assert '"phase": "scan"' in out  # the value, pretty
    assert "recent runs (newest first" in out
    tokens = [line.split()[0] for line in out.split("TOKEN", 1)[1].splitlines()[1:]]
    assert tokens == ["2", "1"]


def test_show_and_list_say_a_run_timed_out_in_red(site_alias: str) -> None:
    lease = objects.try_claim("cleanup", "worker-1", ttl=30)
    error = "task 'cleanup' timed out: it ran past its 2 s"
    objects.release("cleanup", "worker-1", token=lease.token, outcome="timed-out", error=error)
    out = bgtasks("show", "cleanup")
    assert "timed-out" in out and error in out
    assert "timed-out" in bgtasks("list")
    red = StringIO()
    call_command("bgtasks", "list", stdout=red, force_color=True)
    assert "\x1b[31;1mtimed-out" in red.getvalue()
    assert json.loads(bgtasks("show", "cleanup", "--json"))["outcome"] == "timed-out"


def field_lines(out: str) -> dict[str, str]:
    """``show``'s fields (the lines before the value, the error or the runs), by label."""
    fields = {}
    for line in out.splitlines():
        if line.endswith(":") or line.startswith(("value:", "error:", "result:", "recent runs")):
            break
        label, _, value = line.partition("  ")
        fields[label] = value.strip()
    return fields


def test_show_prints_only_what_is_true_of_the_task_now(site_alias: str) -> None:
    lease = objects.try_claim("cleanup", "worker-1", {"done": 1, "total": 2}, ttl=30)
    assert objects.request_cancel("cleanup")

    running = field_lines(bgtasks("show", "cleanup"))
    assert running.items() >= {
        "status": "cancel requested", "owner": "worker-1", "cancel requested": "yes",
        "progress": "50% (1/2)", "token": "1",
    }.items()  # fmt: skip
    assert "last heartbeat" in running and "duration" in running
    # Not ended: no finish, no outcome (a run's outcome is written at its end).
    assert not {"finished", "outcome"} & set(running)

    # It finished anyway: the cancel it was asked for is history, not its state,
    # and nobody holds it, or beats for it, any more.
    objects.release("cleanup", "worker-1", {"done": 2, "total": 2}, token=lease.token)
    out = bgtasks("show", "cleanup")
    ended = field_lines(out)
    assert ended.items() >= {
        "status": "idle", "outcome": "succeeded", "progress": "100% (2/2)", "token": "1",
        "attempt": "1", "trigger": "manual",
    }.items()  # fmt: skip
    assert not {"cancel requested", "owner", "last heartbeat"} & set(ended)
    assert {"started", "finished", "duration"} <= set(ended)
    assert "cancel requested" not in out
    # Every label is padded alike, whichever fields a task shows.
    assert "status            idle" in out and "outcome           succeeded" in out


def test_show_of_a_django_task_says_cancel_requested_only_while_it_runs(
    tasks_site_alias: str,
) -> None:
    from django_bgtasks.models import QueuedTask
    from django_bgtasks.queue.execute import execute
    from tests import djtasks

    result = djtasks.add.enqueue(1, 2)
    claim = QueuedTask.objects.claim("command-test-worker", queues=None)
    assert claim is not None
    bgtasks("cancel", result.id)
    running = bgtasks("show", result.id)
    assert "running (cancel requested)" in running
    assert re.search(r"^worker +command-test-worker$", running, re.M)
    execute(claim)  # it did not look, and succeeded
    ended = bgtasks("show", result.id)
    assert "status     successful\n" in ended and "cancel" not in ended
    assert not re.search(r"^worker ", ended, re.M)  # nobody runs it now
    assert re.search(r"^workers +command-test-worker$", ended, re.M)  # who did
    assert "run after" not in ended  # a field with nothing to say is left out


def test_watch_prints_a_table_each_interval(site_alias: str) -> None:
    objects.try_claim("cleanup", "worker-1", {"progress": 0.5}, ttl=30)

    out = bgtasks("watch", "--interval", "0.05", "--iterations", "3", "--no-color")

    assert out.count("1 task(s), 1 running. Every 0.05 s; Ctrl-C to stop.") == 3
    assert out.count("cleanup") == 3 and "50%" in out
    assert "\x1b" not in out  # no colour and no screen clearing


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_watch_stops_cleanly_on_a_signal(site_alias: str, sig: signal.Signals) -> None:
    objects.try_claim("cleanup", "worker-1", ttl=30)
    process = manage(site_alias, "watch", "--interval", "0.1")
    try:
        seen = read_until(process, "cleanup")
        seen += read_until(process, "cleanup")  # a second table: it is refreshing
        process.send_signal(sig)
        _rest, err = process.communicate(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert "".join(seen).count("Ctrl-C to stop.") == 2


def test_the_queues_table_says_since_when_a_queue_is_paused_and_which_counts_are_capped() -> None:
    out = StringIO()
    reads.show_queues(OutputWrapper(out), no_style(), [])
    assert out.getvalue() == "No Django Tasks queue has tasks or a pause.\n"
    since = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    counts = {
        "READY": Counted(10_000, True),  # stopped at its cap
        "RUNNING": Counted(2, False),
        "SUCCESSFUL": Counted(1234, False),
        "FAILED": Counted(0, False),
    }
    found = [Queue("default", False, None, counts), Queue("emails", True, since, counts)]
    out = StringIO()
    reads.show_queues(OutputWrapper(out), no_style(), found)
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["QUEUE", "PAUSED", "READY", "RUNNING", "SUCCESSFUL", "FAILED"]
    assert lines[1].split() == ["default", "no", "10,000+", "2", "1,234", "0"]
    paused = ["since", *display.when(since).split()]
    assert lines[2].split() == ["emails", *paused, "10,000+", "2", "1,234", "0"]
    assert len(lines) == 3
