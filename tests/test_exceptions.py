"""The errors django-bgtasks raises (django_bgtasks.exceptions): one base,
:class:`BgTasksError`; a timeout and a worker's shutdown are cancels; each
other error is also the Python or Django kind that code already catches;
and each message names the task and what happened."""

from __future__ import annotations

from django.db.transaction import TransactionManagementError

import django_bgtasks
from django_bgtasks import (
    BgTasksError,
    LeaseHeld,
    LeaseLost,
    TaskCancelled,
    TaskTimedOut,
    UnknownTask,
)
from django_bgtasks.exceptions import (
    FenceOnOtherDatabase,
    InAtomicBlock,
    NotInAtomicBlock,
    TaskNotImportable,
    WorkerStopping,
)


def test_the_public_names_share_one_base() -> None:
    for error in (LeaseHeld, LeaseLost, TaskCancelled, UnknownTask):
        assert issubclass(error, BgTasksError)


def test_a_timeout_is_a_cancel_that_says_so() -> None:
    # Code that stops on a cancel stops on a timeout too; it names the limit.
    assert issubclass(TaskTimedOut, TaskCancelled)
    assert django_bgtasks.TaskTimedOut is TaskTimedOut
    assert "TaskTimedOut" in django_bgtasks.__all__
    error = TaskTimedOut("nightly", 2.5)
    assert (error.name, error.timeout) == ("nightly", 2.5)
    assert str(error) == "task 'nightly' timed out: it ran past its 2.5 s"


def test_each_error_is_also_the_kind_code_already_catches() -> None:
    missing = ModuleNotFoundError("No module named 'app'")
    cases = [
        (UnknownTask("nightly"), LookupError, "no background task is registered as 'nightly'"),
        (
            TaskNotImportable("app.tasks.send", "w1", missing),
            ImportError,
            "worker w1 could not import app.tasks.send "
            "(ModuleNotFoundError: No module named 'app')",
        ),
        (InAtomicBlock("claim"), TransactionManagementError, "claim() must be durable"),
        (NotInAtomicBlock("fence"), TransactionManagementError, "fence() locks the lease"),
        (
            FenceOnOtherDatabase("leases", ["default"]),
            TransactionManagementError,
            "fence() guards only writes to the lease database 'leases' (BGTASKS_DATABASE), "
            "not to 'default'",
        ),
        (WorkerStopping("nightly"), TaskCancelled, "task 'nightly' was interrupted"),
    ]
    for error, kind, message in cases:
        assert isinstance(error, BgTasksError) and isinstance(error, kind), error
        assert str(error).startswith(message), str(error)


def test_a_held_or_lost_lease_names_its_task_and_why() -> None:
    held = LeaseHeld("nightly", "host:12:ab")
    assert (held.name, held.holder) == ("nightly", "host:12:ab")
    assert str(held) == "task 'nightly' is already running by host:12:ab"
    assert str(LeaseHeld("nightly")) == "task 'nightly' is already running"
    lost = LeaseLost("nightly", "taken over by another owner")
    assert (lost.name, lost.reason) == ("nightly", "taken over by another owner")
    assert str(lost) == "lease on 'nightly' lost: taken over by another owner"
