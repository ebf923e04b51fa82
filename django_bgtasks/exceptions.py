"""The errors django-bgtasks raises. All share one base, :class:`BgTasksError`.

Bad arguments (a blank name, a ttl <= 0, a value JSON can't encode) are plain
``ValueError``/``TypeError``, raised before any SQL runs, as Python code expects.
"""

from __future__ import annotations

from django.db import transaction


class BgTasksError(Exception):
    """Base class of every django-bgtasks error."""


class LeaseHeld(BgTasksError):
    """The lease is held by another owner, so the work was not started."""

    def __init__(self, name: str, holder: str | None = None) -> None:
        self.name = name
        self.holder = holder
        where = f" by {holder}" if holder else ""
        super().__init__(f"task {name!r} is already running{where}")


class LeaseLost(BgTasksError):
    """This process no longer holds the lease: it was taken over, force-released,
    or could not be renewed before its deadline. Stop writing."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason
        super().__init__(f"lease on {name!r} lost: {reason}")


class TaskCancelled(BgTasksError):
    """An operator asked the holder to stop (``request_cancel``)."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"task {name!r} was cancelled by an operator")


class WorkerStopping(TaskCancelled):
    """The worker running this task is shutting down (SIGTERM/SIGINT): stop
    at the next safe point. A :class:`TaskCancelled`, so code that handles a
    cancel handles a shutdown too; the run is recorded as ``interrupted``, and
    a resumable task is resumed by another worker at once."""

    def __init__(self, name: str) -> None:
        self.name = name
        BgTasksError.__init__(self, f"task {name!r} was interrupted: its worker is stopping")


class TaskTimedOut(TaskCancelled):
    """The run went on past its ``timeout`` (``@task(timeout=S)`` of
    ``LeaseBackend``, ``@background_task(timeout=S)``), by the database's
    clock: stop now. A :class:`TaskCancelled`, so code that handles a cancel
    handles a timeout too; a Django Task is retried while attempts remain,
    else ends ``FAILED`` with this error, and a background run's outcome is
    ``timed-out``."""

    def __init__(self, name: str, timeout: float) -> None:
        self.name = name
        self.timeout = timeout
        BgTasksError.__init__(self, f"task {name!r} timed out: it ran past its {timeout:g} s")


class TaskNotImportable(BgTasksError, ImportError):
    """A worker could not import a Django Task it claimed (its module, or the
    function in it): during a rolling deploy, a task of the new release that
    an old worker claimed. The worker hands it back ``READY`` with its attempt
    given back, and this error kept, for a worker that can import it; it ends
    ``FAILED`` with the import error itself only once no worker has imported
    it for ``OPTIONS["IMPORT_DEADLINE"]``."""

    def __init__(self, path: str, worker: str, error: BaseException) -> None:
        self.path = path
        self.worker = worker
        kind = type(error).__name__
        super().__init__(f"worker {worker} could not import {path} ({kind}: {error})")


class UnknownTask(BgTasksError, LookupError):
    """No ``@background_task`` is registered under this name."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"no background task is registered as {name!r}")


class InAtomicBlock(BgTasksError, transaction.TransactionManagementError):
    """A lease write was called inside ``transaction.atomic()``.

    A claim, heartbeat or release must be durable when it returns. Inside the
    caller's transaction it would be rolled back with it, so it is refused.
    """

    def __init__(self, operation: str) -> None:
        super().__init__(
            f"{operation}() must be durable when it returns, so it cannot run inside "
            "transaction.atomic(). Call it outside the block, or after commit with "
            "transaction.on_commit(). (Tests that take leases need "
            "TransactionTestCase / django_db(transaction=True).)"
        )


class NotInAtomicBlock(BgTasksError, transaction.TransactionManagementError):
    """``fence()`` was called outside ``transaction.atomic()``, where a lock
    would end with the statement and protect nothing."""

    def __init__(self, operation: str) -> None:
        super().__init__(
            f"{operation}() locks the lease for the caller's transaction, so it must be "
            "called inside transaction.atomic() on the BGTASKS_DATABASE alias"
        )


class FenceOnOtherDatabase(BgTasksError, transaction.TransactionManagementError):
    """``fence()`` was asked to guard writes to a database other than the one
    holding the lease table (``BGTASKS_DATABASE``).

    The fence is a row lock held by the caller's transaction on the lease
    database. Writes to another database commit in another transaction, which
    that lock does not hold back: if the lease database's session ends (a
    restart, a cut link, a takeover after ``idle_in_transaction_session_timeout``),
    a new holder can take over while those writes are still uncommitted.
    """

    def __init__(self, lease_alias: str, other_aliases: list[str]) -> None:
        self.lease_alias = lease_alias
        self.other_aliases = other_aliases
        others = ", ".join(repr(alias) for alias in other_aliases)
        super().__init__(
            f"fence() guards only writes to the lease database {lease_alias!r} "
            f"(BGTASKS_DATABASE), not to {others}: the lease row's lock is held by a "
            f"transaction on {lease_alias!r}, and writes to {others} commit in another "
            "transaction that no takeover waits for. Write the fenced data on "
            f"{lease_alias!r} inside transaction.atomic(using={lease_alias!r}), or pass "
            "lease.token to the other database and make its writes check it "
            "(docs/reliability.md, 'A separate lease database')."
        )
