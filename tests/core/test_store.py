"""Where every lease statement runs (core/store.py): one statement a call,
on ``BGTASKS_DATABASE``; a write in autocommit, durable and seen by every
other connection when it returns, refused inside ``transaction.atomic()``
before anything is sent, a read anywhere; and a write in the caller's
transaction, which commits or rolls back with it."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import pytest
from django.db import connections, transaction
from django.test.utils import CaptureQueriesContext

from django_bgtasks import InAtomicBlock
from django_bgtasks.core import store
from django_bgtasks.db import params as params_of
from django_bgtasks.models import BackgroundTask
from tests.dbtools import rows

objects = BackgroundTask.objects


def test_a_write_inside_atomic_is_refused_and_writes_nothing(db_alias: str) -> None:
    lease = objects.try_claim("held", "a", ttl=30)
    before = rows(db_alias)
    writes = [
        lambda: objects.try_claim("new", "a", ttl=30),
        lambda: objects.update_state("held", "a", {"x": 1}, token=lease.token),
        lambda: objects.heartbeat("held", "a", token=lease.token),
        lambda: objects.release("held", "a", token=lease.token),
        lambda: objects.force_release("held"),
        lambda: objects.request_cancel("held"),
        lambda: objects.expire_stale(),
    ]
    for write in writes:
        with transaction.atomic(using=db_alias), pytest.raises(InAtomicBlock, match="durable"):
            write()
    with transaction.atomic(using=db_alias):  # reads are fine
        assert objects.get_state("held").running
    assert rows(db_alias) == before


def test_a_claim_is_visible_to_another_connection_when_it_returns(db_alias: str) -> None:
    objects.try_claim("cleanup", "a", {"n": 1}, ttl=30)
    seen: list[Any] = []

    def other_thread() -> None:  # a thread has its own connection
        try:
            seen.append(objects.get_state("cleanup"))
        finally:
            connections[db_alias].close()

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert seen[0].running and seen[0].value == {"n": 1}


def test_a_write_is_refused_inside_atomic_before_anything_is_sent(db_alias: str) -> None:
    lease = objects.try_claim("held", "a", ttl=30)
    assert lease is not None
    cancel = params_of.RequestCancel("held", lease.token)
    with (
        transaction.atomic(using=db_alias),
        CaptureQueriesContext(connections[db_alias]) as sent,
    ):
        with pytest.raises(InAtomicBlock, match=r"an operation\(\) must be durable"):
            store.write("an operation", cancel)
        assert sent.captured_queries == []  # refused before rendering or sending it
        [row] = store.read(params_of.GetState("held"))  # a read runs anywhere
        assert len(sent.captured_queries) == 1  # in one statement
    assert row["token"] == lease.token and not row["cancel_requested"]


def test_a_write_in_the_callers_transaction_commits_or_rolls_back_with_it(
    db_alias: str,
) -> None:
    lease = objects.try_claim("held", "a", ttl=30)
    assert lease is not None
    cancel = params_of.RequestCancel("held", lease.token)
    with pytest.raises(RuntimeError, match=rf"request_cancel runs inside .*'{db_alias}'"):
        store.write_in_transaction(cancel)  # outside one
    with contextlib.suppress(ZeroDivisionError), transaction.atomic(using=db_alias):
        assert store.write_in_transaction(cancel)
        1 / 0  # noqa: B018  (the caller's other write failed)
    assert not objects.get_state("held").cancel_requested
    with transaction.atomic(using=db_alias):
        assert store.write_in_transaction(cancel)
    assert objects.get_state("held").cancel_requested
