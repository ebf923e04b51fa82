"""``manage.py bgtasks`` (management/commands/bgtasks.py): each subcommand
as the command handles it, its ``--json`` output parsed, its errors,
``request``, ``release``, ``cancel``, ``prune``, ``token``, ``retry``, the
Django Tasks, colour, the ``worker`` subcommand's options, and the exit
status of a real process. A surface: on
the surfaces' engines (SQLite and the embedded PostgreSQL, tests/conftest.py).

The command's parts have their own tests, in tests/management/: the read
subcommands' pages (test_reads.py), ``run`` (test_foreground.py), the
drawing (test_terminal.py), the command line (test_arguments.py),
``procedures`` (test_procedures.py), the filter and bulk actions
(test_bulk.py)."""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
import time
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from django_bgtasks.background.functions import registered_tasks
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


# --- list and show: --json and errors ---------------------------------------------------------


def test_list_json_is_only_json_in_the_api_shape(site_alias: str) -> None:
    objects.try_claim("cleanup", "worker-1", {"done": 1, "total": 4}, ttl=30)
    objects.try_claim("other", "worker-2", ttl=30)

    data = json.loads(bgtasks("list", "--json"))

    assert set(data) == {"tasks", "django_tasks", "read_from"}
    assert data["read_from"]["replica"] is False  # no BGTASKS_READ_DATABASE
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


# --- request ----------------------------------------------------------------------------------


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


# --- colour -----------------------------------------------------------------------------------


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


# --- real processes: the exit status ----------------------------------------------------------


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
