"""``manage.py bgtasks``: every subcommand, its ``--json`` output parsed, its
errors, colour handling, and ``watch``/``run`` stopping cleanly on SIGINT and
SIGTERM in a real process. A surface: on the surfaces' engines (SQLite and
the embedded PostgreSQL, tests/conftest.py)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import time
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from django_bgtasks import RunningLease, background_task
from django_bgtasks.background.functions import registered_tasks
from django_bgtasks.core.leases import TaskState
from django_bgtasks.models import BackgroundTask, TaskRun
from django_bgtasks.operations import task_reads
from tests.dbtools import a_worker_runs, backdate, rows, runs
from tests.procs import ROOT, worker_env

objects = BackgroundTask.objects


def bgtasks(*args: str) -> str:
    out = StringIO()
    call_command("bgtasks", *args, stdout=out)
    return out.getvalue()


def without_age(data: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in data.items() if key != "heartbeat_age"}


# --- list and show ----------------------------------------------------------------------------


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


def test_list_json_is_only_json_in_the_api_shape(site_alias: str) -> None:
    objects.try_claim("cleanup", "worker-1", {"done": 1, "total": 4}, ttl=30)
    objects.try_claim("other", "worker-2", ttl=30)

    data = json.loads(bgtasks("list", "--json"))

    assert set(data) == {"tasks", "django_tasks"}
    # The API's list: the rows, and the registered tasks that never ran.
    expected = [task_reads.task_json(state) for state in task_reads.task_states()]
    assert [without_age(task) for task in data["tasks"]] == [without_age(t) for t in expected]
    listed = {task["name"]: task for task in data["tasks"]}
    assert listed["cleanup"]["progress"] == 0.25
    assert listed["surface-quick"]["status"] == "never run"


def test_list_json_with_no_rows_lists_the_registered_tasks(site_alias: str) -> None:
    data = json.loads(bgtasks("list", "--json"))
    assert [task["name"] for task in data["tasks"]] == list(registered_tasks())
    assert {task["status"] for task in data["tasks"]} == {"never run"}


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


def test_show_json_is_the_task_state(site_alias: str) -> None:
    objects.try_claim("cleanup", "worker-1", {"done": 1}, ttl=30)
    data = json.loads(bgtasks("show", "cleanup", "--json"))
    assert without_age(data) == without_age(objects.get_state("cleanup").as_json())


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("nope", "No task named 'nope' has run, and none is registered."),
        (" padded", "whitespace"),
        ("x" * 201, "at most 200"),
    ],
)
def test_show_refuses_unknown_or_bad_names(site_alias: str, name: str, message: str) -> None:
    with pytest.raises(CommandError, match=message.replace("(", r"\(").replace(")", r"\)")):
        bgtasks("show", name)


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


# --- run --------------------------------------------------------------------------------------


def test_run_runs_in_the_foreground_with_a_progress_bar(site_alias: str) -> None:
    out = bgtasks("run", "surface-quick")

    assert "Running 'surface-quick' here as " in out
    assert "[" + "#" * 30 + "] 100% (3/3)" in out
    assert "'surface-quick' succeeded (token 1) in " in out
    assert 'result: {"counted": 3}' in out
    state = objects.get_state("surface-quick")
    assert (state.running, state.outcome, state.ttl) == (False, "succeeded", 30.0)


def test_run_of_a_task_without_progress_says_how_long_it_has_run(site_alias: str) -> None:
    @background_task(name="surface-ticks", ttl=30)
    def ticks(lease: RunningLease) -> str:
        time.sleep(0.7)
        return "ticked"

    out = bgtasks("run", "surface-ticks")

    # Not a bar of question marks, nor "idle" once it ended: the time it has run,
    # then how it ended (in a pipe: without the spinner, a line per status).
    assert "?" not in out and "idle" not in out, out
    lines = out.splitlines()
    assert re.fullmatch(r"running for \d+\.\d s", lines[1]), out
    assert re.fullmatch(r"succeeded after \d+\.\d s", lines[2]), out
    assert lines[3].startswith("'surface-ticks' succeeded (token 1) in ")


def test_run_takes_a_ttl(site_alias: str) -> None:
    bgtasks("run", "surface-quick", "--ttl", "7")
    assert objects.get_state("surface-quick").ttl == 7.0


def test_run_passes_its_arguments_to_the_task(site_alias: str) -> None:
    # surface-sum(lease, numbers), surface-quick(lease, total=3): tests/testapp
    assert "result: 6" in bgtasks("run", "surface-sum", "--args", "[[1, 2, 3]]")
    out = bgtasks("run", "surface-quick", "--kwargs", '{"total": 2}')
    assert "] 100% (2/2)" in out and 'result: {"counted": 2}' in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope"], "No background task is registered as 'nope'"),
        (["surface-quick", "--ttl", "0"], "ttl must be a positive"),
        (["surface-quick", "--ttl", "1e9"], "at most"),
        # The arguments, as `bgtasks request` checks them: surface-quick(lease,
        # total=3), surface-sum(lease, numbers), tests/testapp
        (
            ["surface-quick", "--kwargs", '{"bogus": 1}'],
            "task 'surface-quick' can't take these arguments: "
            "got an unexpected keyword argument 'bogus'",
        ),
        (["surface-quick", "--args", "[1, 2]"], "too many positional arguments"),
        (["surface-sum"], "missing a required argument: 'numbers'"),
        (
            ["surface-sum", "--args", '{"numbers": [1]}'],
            "argument --args: args must be a list or tuple (a JSON array), not an object",
        ),
        (
            ["surface-sum", "--kwargs", "[[1]]"],
            "argument --kwargs: kwargs must be a dict (a JSON object), not an array",
        ),
        (["surface-sum", "--kwargs", "{nope"], "argument --kwargs: kwargs is not valid JSON: "),
    ],
)
def test_run_refuses_bad_input_and_writes_nothing(
    site_alias: str, args: list[str], message: str
) -> None:
    with pytest.raises(CommandError, match=re.escape(message)):
        bgtasks("run", *args)
    assert rows(site_alias) == []


def test_run_checks_arguments_handed_over_past_argparse(site_alias: str) -> None:
    with pytest.raises(CommandError, match=re.escape("args must be a list or tuple")):
        call_command("bgtasks", "run", "surface-sum", task_args="[1]")
    with pytest.raises(CommandError, match=re.escape("kwargs must be a dict")):
        call_command("bgtasks", "run", "surface-sum", task_kwargs=[1])
    assert rows(site_alias) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # surface-quick(lease, total=3), surface-sum(lease, numbers): tests/testapp
        (
            ["surface-quick", "--kwargs", '{"bogus": 1}'],
            "task 'surface-quick' can't take these arguments: "
            "got an unexpected keyword argument 'bogus'",
        ),
        (["surface-quick", "--args", "[1, 2]"], "too many positional arguments"),
        (["surface-sum"], "missing a required argument: 'numbers'"),
        (["nope"], "No background task is registered as 'nope' (registered: "),
        (["adhoc"], "No background task is registered as 'adhoc' (registered: "),
    ],
)
def test_request_refuses_what_no_worker_could_run_and_writes_nothing(
    site_alias: str, args: list[str], message: str
) -> None:
    objects.try_claim("adhoc", "worker-1", ttl=30)
    objects.force_release("adhoc")  # it has run, under lease(): no worker runs it
    before = (rows(site_alias), runs(site_alias))
    with pytest.raises(CommandError, match=re.escape(message)):
        bgtasks("request", *args)
    assert (rows(site_alias), runs(site_alias)) == before


def test_request_files_a_task_that_only_a_worker_registered(site_alias: str) -> None:
    a_worker_runs("worker-only")
    assert "Requested 'worker-only'" in bgtasks("request", "worker-only", "--kwargs", '{"x": 1}')
    assert objects.get(name="worker-only").request == {"args": [], "kwargs": {"x": 1}}


def test_run_refuses_a_held_task_and_names_the_holder(site_alias: str) -> None:
    objects.try_claim("surface-quick", "worker-1", ttl=30)
    before = rows(site_alias)
    with pytest.raises(CommandError, match=r"already running on worker-1 \(token 1\)"):
        bgtasks("run", "surface-quick")
    assert rows(site_alias) == before


def test_run_fails_when_the_task_fails(site_alias: str) -> None:
    with pytest.raises(CommandError, match=r"'surface-fails' failed \(token 1\): RuntimeError"):
        bgtasks("run", "surface-fails")
    state = objects.get_state("surface-fails")
    assert state.outcome == "failed" and "disk on fire" in state.error


class Terminal(StringIO):
    def isatty(self) -> bool:
        return True


def state(value: Any) -> TaskState:
    now = dt.datetime.now(dt.UTC)
    return TaskState("t", value, True, "w", 1, 30.0, now, None, now, False, "", "", False, 0.1)


def test_the_progress_bar_redraws_in_place_on_a_terminal() -> None:
    from django.core.management.base import OutputWrapper
    from django.core.management.color import no_style

    from django_bgtasks.management.terminal import ProgressBar

    screen = Terminal()
    bar = ProgressBar(OutputWrapper(screen), no_style())
    bar.draw(state({"done": 1, "total": 4, "phase": "a long phase name"}))
    bar.draw(state({"done": 1, "total": 4, "phase": "a long phase name"}))  # unchanged: nothing
    bar.draw(state({"done": 2, "total": 4}))
    bar.close()

    first = "[" + "#" * 7 + "-" * 23 + '] 25% (1/4) {"phase":"a long phase name"}'
    second = "[" + "#" * 15 + "-" * 15 + "] 50% (2/4)"
    # Each redraw returns to the line's start and covers the longer line before it.
    assert screen.getvalue() == f"\r{first}\r{second.ljust(len(first))}\n"
    assert "\x1b" not in screen.getvalue()


def test_a_run_without_progress_turns_a_spinner_and_counts_its_time_on_a_terminal() -> None:
    from django.core.management.base import OutputWrapper
    from django.core.management.color import no_style

    from django_bgtasks.management.terminal import ProgressBar

    screen = Terminal()
    bar = ProgressBar(OutputWrapper(screen), no_style())
    for age in (0.1, 0.3, 0.5, 0.7, 0.9):
        bar.draw(dataclasses.replace(state(None), heartbeat_age=age))
    running = state(None)
    ended = dataclasses.replace(
        running,
        running=False,
        finished_at=running.started_at + dt.timedelta(seconds=1),
        outcome="succeeded",
    )
    bar.draw(ended)
    bar.draw(ended)  # unchanged: nothing
    bar.close()

    frames = [
        f"{spin} running for {age} s"
        for spin, age in zip("|/-\\|", ("0.1", "0.3", "0.5", "0.7", "0.9"), strict=True)
    ]
    assert screen.getvalue() == "".join(f"\r{frame}" for frame in frames) + (
        "\rsucceeded after 1.0 s\n"
    )


# --- release and cancel ---------------------------------------------------------------------


def test_release_refuses_without_force_and_names_the_holder(site_alias: str) -> None:
    objects.try_claim("cleanup", "worker-1", ttl=30)
    before = rows(site_alias)

    with pytest.raises(CommandError) as info:
        bgtasks("release", "cleanup")

    message = str(info.value)
    assert "held by worker-1 (token 1, running)" in message and "--force" in message
    assert "bgtasks cancel cleanup" in message
    assert rows(site_alias) == before


def test_release_force_ends_the_lease(site_alias: str) -> None:
    lease = objects.try_claim("cleanup", "worker-1", ttl=30)
    backdate(site_alias, "cleanup", 40)  # a holder that died: the reason to force

    out = bgtasks("release", "cleanup", "--force")

    assert "Released 'cleanup' (token 1, held by worker-1)." in out
    state = objects.get_state("cleanup")
    assert (state.running, state.stale, state.outcome) == (False, False, "released-by-operator")
    assert not objects.heartbeat("cleanup", "worker-1", token=lease.token)


def test_release_refuses_what_is_not_held_or_has_changed_hands(site_alias: str) -> None:
    objects.try_claim("cleanup", "worker-1", ttl=30)
    objects.force_release("cleanup")
    with pytest.raises(CommandError, match="not held; there is nothing to release"):
        bgtasks("release", "cleanup", "--force")
    with pytest.raises(CommandError, match="No task named 'nope' has run"):
        bgtasks("release", "nope", "--force")

    objects.try_claim("cleanup", "worker-2", ttl=30)  # token 2
    with pytest.raises(CommandError, match="token 1 no longer holds it"):
        bgtasks("release", "cleanup", "--force", "--token", "1")
    assert objects.get_state("cleanup").running


def test_cancel_asks_the_holder_to_stop(site_alias: str) -> None:
    lease = objects.try_claim("cleanup", "worker-1", ttl=30)

    out = bgtasks("cancel", "cleanup")

    assert "Asked worker-1 to stop 'cleanup' (token 1)" in out
    assert "(heartbeats every 10 s)" in out
    renewal = objects.renew("cleanup", "worker-1", token=lease.token)
    assert renewal is not None and renewal.cancel_requested


def test_cancel_asks_only_the_run_it_names(site_alias: str) -> None:
    first = objects.try_claim("cleanup", "worker-1", ttl=30)
    objects.force_release("cleanup")
    objects.try_claim("cleanup", "worker-2", ttl=30)

    with pytest.raises(CommandError, match=f"token {first.token} no longer holds it"):
        bgtasks("cancel", "cleanup", "--token", str(first.token))
    assert not objects.get_state("cleanup").cancel_requested
    with pytest.raises(CommandError, match="between 1 and"):
        bgtasks("cancel", "cleanup", "--token", "0")
    assert not objects.get_state("cleanup").cancel_requested

    assert "(token 2)" in bgtasks("cancel", "cleanup", "--token", "2")
    assert objects.get_state("cleanup").cancel_requested


def test_cancel_refuses_what_is_not_running(site_alias: str) -> None:
    objects.try_claim("cleanup", "worker-1", ttl=30)
    objects.force_release("cleanup")
    with pytest.raises(CommandError, match="not running; there is nothing to cancel"):
        bgtasks("cancel", "cleanup")
    with pytest.raises(CommandError, match="No task named 'nope'"):
        bgtasks("cancel", "nope")


# --- prune ------------------------------------------------------------------------------------


@pytest.fixture
def history(site_alias: str) -> None:
    """Task "old": three runs 40, 20 and 10 days old. Task "recent": one run
    today. Task "silent": a holder that stopped heartbeating."""
    for days in (40, 20, 10):
        lease = objects.try_claim("old", "worker-1", ttl=30)
        objects.release("old", "worker-1", token=lease.token)
        finished = dt.datetime.now(dt.UTC) - dt.timedelta(days=days)
        TaskRun.objects.using(site_alias).filter(name="old", token=lease.token).update(
            started_at=finished, finished_at=finished
        )
    lease = objects.try_claim("recent", "worker-1", ttl=30)
    objects.release("recent", "worker-1", token=lease.token)
    objects.try_claim("silent", "worker-2", ttl=30)
    backdate(site_alias, "silent", 40)


def test_prune_dry_run_changes_nothing(site_alias: str, history: None) -> None:
    before = (rows(site_alias), runs(site_alias))

    out = bgtasks("prune", "--days", "15", "--dry-run")

    assert "Would record 1 silent holder(s) as lost: silent." in out
    assert "Would delete 2 run(s) that finished more than 15 day(s) ago." in out
    assert (rows(site_alias), runs(site_alias)) == before


def test_prune_expires_silent_holders_and_deletes_old_runs(site_alias: str, history: None) -> None:
    out = bgtasks("prune", "--days", "15")

    assert "Recorded 1 silent holder(s) as lost." in out
    assert "Deleted 2 run(s) that finished more than 15 day(s) ago." in out
    assert [(run["name"], run["token"]) for run in runs(site_alias)] == [
        ("old", 3),  # 10 days old: kept
        ("recent", 1),
        ("silent", 1),  # recorded as lost just now
    ]
    assert runs(site_alias, "silent")[0]["outcome"] == "lost"
    assert objects.get_state("silent").outcome == "lost"


def test_prune_keeps_each_tasks_newest_run_and_defaults_to_the_setting(
    site_alias: str, history: None, settings: Any
) -> None:
    settings.BGTASKS_HISTORY_DAYS = 5
    bgtasks("prune")
    # All of "old"'s runs are older than 5 days; its newest is kept anyway.
    assert [run["token"] for run in runs(site_alias, "old")] == [3]


def test_prune_refuses_negative_days(site_alias: str) -> None:
    with pytest.raises(CommandError, match="--days must be 0 or more"):
        bgtasks("prune", "--days", "-1")


# --- watch and colour ---------------------------------------------------------------------------


def test_watch_prints_a_table_each_interval(site_alias: str) -> None:
    objects.try_claim("cleanup", "worker-1", {"progress": 0.5}, ttl=30)

    out = bgtasks("watch", "--interval", "0.05", "--iterations", "3", "--no-color")

    assert out.count("1 task(s), 1 running. Every 0.05 s; Ctrl-C to stop.") == 3
    assert out.count("cleanup") == 3 and "50%" in out
    assert "\x1b" not in out  # no colour and no screen clearing


@pytest.mark.parametrize("args", [["--interval", "0"], ["--iterations", "0"]])
def test_watch_refuses_bad_options(site_alias: str, args: list[str]) -> None:
    with pytest.raises(CommandError, match="must be"):
        bgtasks("watch", *args)


def test_colour_can_be_forced_or_switched_off_after_the_subcommand(site_alias: str) -> None:
    objects.try_claim("cleanup", "worker-1", ttl=30)

    assert "\x1b[" in bgtasks("list", "--force-color")
    assert "\x1b[" in bgtasks("--force-color", "list")
    assert "\x1b[" not in bgtasks("list", "--no-color")
    # Even forced, colour is never in --json output, and a pipe gets no screen clearing.
    listed = json.loads(bgtasks("list", "--json", "--force-color"))["tasks"]
    assert "cleanup" in [task["name"] for task in listed]
    watched = bgtasks("watch", "--iterations", "1", "--force-color")
    assert "\x1b[" in watched and "\x1b[2J" not in watched


def test_a_subcommand_is_required(site_alias: str) -> None:
    with pytest.raises(CommandError, match="required"):
        bgtasks()


def test_djangos_common_options_are_accepted_after_the_subcommand_too() -> None:
    from django_bgtasks.management.commands.bgtasks import Command

    parser = Command().create_parser("manage.py", "bgtasks")
    given = ["-v", "3", "--settings", "s", "--pythonpath", "p", "--traceback", "--skip-checks"]
    after = parser.parse_args(["worker", *given, "--no-color"])
    assert (after.verbosity, after.settings, after.pythonpath) == (3, "s", "p")
    assert after.traceback and after.skip_checks and after.no_color
    before = parser.parse_args(["--verbosity", "0", "list"])
    assert (before.verbosity, before.traceback) == (0, False)
    with pytest.raises(CommandError, match="invalid choice: 4"):
        parser.parse_args(["workers", "-v", "4"])


# --- real processes: exit codes and signals ----------------------------------------------


def manage(alias: str, *args: str, **popen: Any) -> subprocess.Popen[str]:
    """``manage.py bgtasks ...`` in a new process, on the test database."""
    code = (
        "import sys; from tests.procs import _setup_django; _setup_django(); "
        "from django.core.management import execute_from_command_line; "
        "execute_from_command_line(['manage.py', *sys.argv[1:]])"
    )
    env = worker_env(alias)
    env["PYTHONUNBUFFERED"] = "1"
    return subprocess.Popen(
        [sys.executable, "-c", code, "bgtasks", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
        **popen,
    )


def read_until(process: subprocess.Popen[str], text: str, timeout: float = 30) -> list[str]:
    assert process.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        if text in line:
            return lines
    process.kill()
    raise AssertionError(f"no {text!r} in {lines}; stderr: {process.communicate()[1]}")


def communicate_or_kill(process: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    """``communicate()``; a process that hangs is killed, its output in the failure."""
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise AssertionError(
            f"no exit within {timeout} s; stdout: {out!r}; stderr: {err!r}"
        ) from None


def test_errors_exit_with_status_1_and_a_message(site_alias: str) -> None:
    objects.try_claim("cleanup", "worker-1", ttl=30)
    process = manage(site_alias, "release", "cleanup")
    out, err = process.communicate(timeout=60)
    assert process.returncode == 1
    assert out == ""
    assert err.startswith("CommandError: Task 'cleanup' is held by worker-1")

    process = manage(site_alias, "show", "cleanup", "--json")
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0 and err == ""
    assert json.loads(out)["owner"] == "worker-1"


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


def test_ctrl_c_during_run_cancels_the_task(site_alias: str) -> None:
    process = manage(site_alias, "run", "surface-slow")
    try:
        read_until(process, "Running 'surface-slow'")
        read_until(process, "(1/240)")
        read_until(process, "/240)")  # the progress bar is moving (by coalesced steps)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()

    assert "Asked the task to stop" in out
    assert process.returncode == 1
    assert "CommandError: 'surface-slow' was cancelled (token 1)" in err
    state = objects.get_state("surface-slow")
    assert (state.running, state.outcome) == (False, "cancelled")
    assert state.value["done"] < 40


@pytest.mark.parametrize("together", [False, True], ids=["one-after-the-other", "together"])
def test_a_second_interrupt_abandons_the_run_and_releases_its_lease(
    site_alias: str, together: bool
) -> None:
    # A step longer than the test: the task cannot act on the cancel that the
    # first interrupt asks for, so only giving its lease up ends the run.
    process = manage(site_alias, "run", "surface-slow", "--kwargs", '{"pause": 120}')
    try:
        read_until(process, "Running 'surface-slow'")
        if together:
            # Both delivered while the process is stopped. (Two pending
            # SIGINTs would merge into one, so the second is a SIGTERM.)
            # Whether the command acts on the first before the second comes
            # in is up to its threads; either way the run is abandoned.
            os.kill(process.pid, signal.SIGSTOP)
            process.send_signal(signal.SIGINT)
            process.send_signal(signal.SIGTERM)
            time.sleep(0.1)
            os.kill(process.pid, signal.SIGCONT)
        else:
            process.send_signal(signal.SIGINT)
            read_until(process, "Asked the task to stop")
            process.send_signal(signal.SIGINT)
        _out, err = communicate_or_kill(process, timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()

    assert process.returncode == 1, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert "CommandError: Abandoned 'surface-slow' (token 1); its lease is released." in err
    state = objects.get_state("surface-slow")
    assert (state.running, state.outcome, state.token) == (False, "cancelled", 1)
    assert "abandoned" in state.error


# --- token ------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_token_prints_only_the_token_on_stdout(make_staff: Any, settings: Any) -> None:
    from django_bgtasks.authentication import user_for_token

    settings.BGTASKS_API_AUTHENTICATION = ["django_bgtasks.authentication.signed_token"]
    user = make_staff("ops-bot", "change_backgroundtask")
    out, err = StringIO(), StringIO()
    call_command("bgtasks", "token", "ops-bot", "--max-age", "3600", stdout=out, stderr=err)
    token = out.getvalue()
    assert token.endswith("\n") and token.count("\n") == 1
    assert user_for_token(token.strip()) == user
    assert "'ops-bot', who may view and operate tasks" in err.getvalue()
    assert "Authorization: Bearer" in err.getvalue()
    assert "does not list" not in err.getvalue()


@pytest.mark.django_db
def test_token_says_when_the_api_will_not_accept_it(make_staff: Any) -> None:
    make_staff("ops-bot", "view_backgroundtask")
    err = StringIO()
    call_command("bgtasks", "token", "ops-bot", stdout=StringIO(), stderr=err)
    assert "who may view tasks" in err.getvalue()
    assert "BGTASKS_API_AUTHENTICATION does not list" in err.getvalue()


@pytest.mark.django_db
def test_token_refuses_unknown_users_and_users_without_permission(make_staff: Any) -> None:
    make_staff("staff")
    make_staff("member", "view_backgroundtask", staff=False)
    with pytest.raises(CommandError, match="There is no user 'nobody'"):
        bgtasks("token", "nobody")
    for username in ("staff", "member"):
        with pytest.raises(CommandError, match="may not see background tasks"):
            bgtasks("token", username)


@pytest.mark.parametrize("max_age", ["0", "-5", "1.5", "x", str(3650 * 86400 + 1)])
def test_token_refuses_a_bad_max_age(max_age: str) -> None:
    with pytest.raises(CommandError):
        bgtasks("token", "ops-bot", "--max-age", max_age)


# --- Django Tasks (LeaseBackend) ----------------------------------------------------------


def test_list_show_cancel_and_prune_django_tasks(tasks_site_alias: str) -> None:
    from django_bgtasks.models import QueuedTask
    from django_bgtasks.queue.execute import execute
    from tests import djtasks

    done = djtasks.add.enqueue(1, 2)
    claim = QueuedTask.objects.claim("command-test-worker", queues=None)
    assert claim is not None
    execute(claim)
    waiting = djtasks.add.using(queue_name="other", priority=3).enqueue(5, 5)
    listing = bgtasks("list")
    assert "Django Tasks" in listing and done.id in listing and waiting.id in listing
    data = json.loads(bgtasks("list", "--json"))
    by_id = {task["id"]: task for task in data["django_tasks"]}
    assert by_id[done.id]["status"] == "SUCCESSFUL"
    assert (
        by_id[waiting.id].items() >= {"status": "READY", "queue": "other", "priority": 3}.items()
    )
    shown = json.loads(bgtasks("show", done.id, "--json"))
    assert shown["worker_ids"] == ["command-test-worker"] and shown["attempts"] == 1
    assert "tests.djtasks.add" in bgtasks("show", waiting.id)
    assert "it will not run" in bgtasks("cancel", waiting.id)
    with pytest.raises(CommandError, match="already finished"):
        bgtasks("cancel", waiting.id)
    assert "Would delete 0 Django Task result(s)" in bgtasks("prune", "--dry-run")
    QueuedTask.objects.using(tasks_site_alias).update(finished_at="2000-01-01T00:00:00Z")
    assert "Deleted 2 Django Task result(s)" in bgtasks("prune")
    assert QueuedTask.objects.using(tasks_site_alias).count() == 0


def test_retry_runs_a_failed_django_task_again(tasks_site_alias: str, tmp_path: Any) -> None:
    from django_bgtasks.models import QueuedTask
    from django_bgtasks.queue.execute import execute
    from tests import djtasks

    failed = djtasks.fails_first.enqueue()
    claim = QueuedTask.objects.claim("command-test-worker", queues=None)
    assert claim is not None and execute(claim) == "FAILED"
    out = bgtasks("retry", failed.id)
    assert out == f"Retried Django Task {failed.id}: ready to run again (attempt 2 of 2).\n"
    assert json.loads(bgtasks("show", failed.id, "--json"))["status"] == "READY"

    table = QueuedTask.objects.using(tasks_site_alias)
    before = list(table.values())
    with pytest.raises(CommandError, match=f"^Django Task {failed.id} is ready, not failed; "):
        bgtasks("retry", failed.id)
    missing = "00000000-0000-4000-8000-000000000000"
    with pytest.raises(CommandError, match=f"^No Django Task has the id '{missing}'\\.$"):
        bgtasks("retry", missing)
    with pytest.raises(CommandError, match=r"^'cleanup' is not a Django Task's id: that is"):
        bgtasks("retry", "cleanup")  # a background task's name is no Django Task's id
    with pytest.raises(CommandError, match="Give a failed Django Task's id, or filter options"):
        bgtasks("retry")
    assert list(table.values()) == before
    record = str(tmp_path / "record")
    unique = djtasks.unique_record.enqueue(record, "a")
    QueuedTask.objects.cancel(unique.id)
    holder = djtasks.unique_record.enqueue(record, "b")
    before = list(table.values())
    held = re.escape(f"unique key 'tests.djtasks.unique_record' ({holder.id}) is ready")
    with pytest.raises(CommandError, match=held):
        bgtasks("retry", unique.id)
    assert list(table.values()) == before


@pytest.mark.parametrize(
    ("options", "logged"),
    [
        (["-v", "0", "--settings", "tests.worker_settings"], False),
        (["--settings=tests.worker_settings", "--verbosity", "2"], True),
    ],
    ids=["v0", "v2"],
)
def test_settings_and_verbosity_after_the_worker_subcommand_take_effect(
    site_alias: str, options: list[str], logged: bool
) -> None:
    assert objects.request_run("surface-quick")
    env = worker_env(site_alias)
    # Settings that can't be imported: only --settings gets the worker to the
    # test database, where the request is.
    env["DJANGO_SETTINGS_MODULE"] = "tests.no_such_settings"
    worker = ["bgtasks", "worker", "--task", "surface-quick", "--once"]
    process = subprocess.Popen(
        [sys.executable, "-m", "django", *worker, *options],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    _, err = communicate_or_kill(process, 60)
    assert process.returncode == 0, err
    assert [run["outcome"] for run in runs(site_alias, "surface-quick")] == ["succeeded"]
    assert ("INFO django_bgtasks.worker: task 'surface-quick' started" in err) == logged, err


@pytest.mark.parametrize(
    ("queue", "message"),
    [
        ("", "queue name must not be blank"),
        ("x" * 101, "queue name must be at most 100 characters, not 101"),
        (" default", "queue name must not start or end with whitespace"),
    ],
)
def test_a_worker_refuses_a_bad_queue_name_before_it_starts(
    site_alias: str, queue: str, message: str
) -> None:
    """Refused by the command, with the reason, before the worker writes its
    row or claims: not by each claim of its queue threads, which would end
    them one by one."""
    from django_bgtasks.models import Worker as WorkerRow

    with pytest.raises(CommandError, match=re.escape(message)):
        bgtasks("worker", "--queue", queue, "--once")
    assert not WorkerRow.objects.using(site_alias).exists()


def test_procedures_are_mariadbs_elsewhere_a_clear_error(refusal_alias: str) -> None:
    """``bgtasks procedures`` on SQLite: the queue has none there (MariaDB's
    are tested in tests/db/test_mariadb_routines.py)."""
    for args in ([], ["--drop"]):
        with pytest.raises(
            CommandError,
            match=re.escape(
                f"database {refusal_alias!r} is SQLite: the queue has stored procedures only "
                "on MariaDB"
            ),
        ):
            call_command("bgtasks", "procedures", *args)
