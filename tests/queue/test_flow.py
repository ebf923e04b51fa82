"""Flow limits of Django Tasks (queue/flow.py, the claim of each db/ vendor,
migration 0013's triggers): ``@task(concurrency=N, concurrency_key=...)``
and ``@task(rate_limit="N/s", rate_key=...)``, claimed in this process on
every engine, and every bad option refused with its reason. Real workers:
tests/faults/test_flow_workers.py."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pytest
from django.utils import timezone

from django_bgtasks import compat
from django_bgtasks.models import FlowSlot, QueuedTask
from django_bgtasks.queue.flow import Rate, parse_rate
from django_bgtasks.queue.manager import Claim
from tests import djtasks
from tests.queue.test_backend import backdate

try:
    from django.tasks import task
except ImportError:  # Django 5.2
    from django_tasks import task  # type: ignore[no-redef]


def claim(limit: int = 10, owner: str = "w") -> list[Claim]:
    return QueuedTask.objects.claim_many(owner, queues=None, limit=limit)


def args_of(claims: list[Claim]) -> list[Any]:
    return [str(claim.args[0]) for claim in claims]


def held(alias: str) -> dict[str, int]:
    """The concurrency slots held, by key."""
    counts: dict[str, int] = {}
    for slot in FlowSlot.objects.using(alias).filter(kind="concurrency", seq__isnull=False):
        counts[slot.flow_key] = counts.get(slot.flow_key, 0) + 1
    return counts


def running(alias: str, **filters: Any) -> int:
    return QueuedTask.objects.using(alias).filter(status="RUNNING", **filters).count()


def test_at_most_n_of_a_key_are_claimed_and_an_end_frees_a_slot(tasks_alias: str) -> None:
    a = [djtasks.per_account.enqueue("a") for _ in range(3)]
    djtasks.per_account.enqueue("b")
    djtasks.add.enqueue(1, 2)
    first = claim()
    assert sorted(args_of(first)) == ["1", "a", "a", "b"]  # the third "a" waits
    assert claim() == []
    assert held(tasks_alias) == {"account:a": 2, "account:b": 1}
    assert QueuedTask.objects.using(tasks_alias).get(uuid=a[2].id).status == "READY"
    [done] = [c for c in first if c.args == ["a"]][:1]
    assert QueuedTask.objects.finish(done, status="SUCCESSFUL")
    [third] = claim()
    assert str(third.uuid) == a[2].id
    assert held(tasks_alias) == {"account:a": 2, "account:b": 1}
    assert running(tasks_alias, concurrency_key="account:a") == 2


def test_tasks_over_their_limit_do_not_hold_back_the_tasks_behind_them(tasks_alias: str) -> None:
    """No head-of-line blocking: a claim of one passes over the ready tasks of
    a key at its limit, and of a key whose window is spent, to the first task
    that may start, in the same queue."""
    for _ in range(2):
        djtasks.per_account.enqueue("a")
    for n in range(7):
        djtasks.two_an_hour.enqueue("x", n)
    assert len(claim()) == 4
    for _ in range(5):
        djtasks.per_account.enqueue("a")
    behind = djtasks.add.enqueue(2, 2)
    [only] = claim(limit=1)
    assert str(only.uuid) == behind.id
    assert QueuedTask.objects.using(tasks_alias).filter(status="READY").count() == 10


def test_a_slot_comes_back_when_its_task_is_given_back_recovered_or_deleted(
    tasks_alias: str,
) -> None:
    djtasks.per_account.enqueue("a")
    [first] = claim(owner="lost-reply")
    assert QueuedTask.objects.give_back("lost-reply", held=[]) == [
        (first.seq, first.uuid, "tests.djtasks.per_account")
    ]
    assert held(tasks_alias) == {}
    [again] = claim(limit=1)
    assert again.uuid == first.uuid and again.token == first.token + 1
    assert held(tasks_alias) == {"account:a": 1}
    backdate(tasks_alias, 3600)  # its worker went silent
    assert [(lost.uuid, lost.status) for lost in QueuedTask.objects.recover()] == [
        (first.uuid, "FAILED")
    ]
    assert held(tasks_alias) == {}
    djtasks.per_account.enqueue("a")
    claim()
    assert held(tasks_alias) == {"account:a": 1}
    QueuedTask.objects.using(tasks_alias).filter(status="RUNNING").delete()
    assert held(tasks_alias) == {}


def test_a_rate_key_starts_at_most_n_per_window(tasks_alias: str) -> None:
    for n in range(3):
        djtasks.two_an_hour.enqueue("x", n)
    djtasks.two_an_hour.enqueue("y", 9)
    first = claim()
    assert sorted(claim.args[1] for claim in first) == [0, 1, 9]
    for claimed in first:  # ending a run does not give a start back
        QueuedTask.objects.finish(claimed, status="SUCCESSFUL")
    assert claim() == []
    # An hour later (by the slots' clock) the window has room again.
    an_hour_ago = timezone.now() - dt.timedelta(hours=1, seconds=1)
    FlowSlot.objects.using(tasks_alias).filter(kind="rate").update(started_at=an_hour_ago)
    [last] = claim()
    assert last.args == ["x", 2]
    slots = FlowSlot.objects.using(tasks_alias).filter(kind="rate", flow_key="mail:x")
    assert sorted(slot.slot for slot in slots) == [1, 2]


def test_a_runs_recorded_start_is_its_rate_slots_time(tasks_alias: str) -> None:
    """The rate limit counts its slots' times, and an operator reads a run's
    start from its row: one read of the clock, so that starts a window apart
    by one are a window apart by the other."""
    for n in range(2):
        djtasks.two_an_hour.enqueue("x", n)
    claimed = claim()
    assert len(claimed) == 2
    slots = FlowSlot.objects.using(tasks_alias).filter(kind="rate", seq__isnull=False)
    rows = QueuedTask.objects.using(tasks_alias).filter(seq__in=[c.seq for c in claimed])
    slot_times = {slot.seq: slot.started_at for slot in slots}
    assert slot_times.keys() == {row.seq for row in rows}
    apart = [abs(row.last_attempted_at - slot_times[row.seq]) for row in rows]
    assert apart == [dt.timedelta(0)] * 2


def test_a_task_with_both_limits_needs_a_slot_of_each(tasks_alias: str) -> None:
    djtasks.both_limits.enqueue("a", "b")
    djtasks.both_limits.enqueue("a", "b")  # "a" is busy
    djtasks.both_limits.enqueue("c", "b")
    djtasks.both_limits.enqueue("d", "b")
    djtasks.both_limits.enqueue("e", "b")  # "b" has started three this minute
    assert sorted(c.args[0] for c in claim()) == ["a", "c", "d"]
    assert claim() == []
    assert held(tasks_alias) == {"a": 1, "c": 1, "d": 1}


def test_the_keys_are_formed_at_enqueue_and_stored_with_the_limits(tasks_alias: str) -> None:
    ids = [
        djtasks.per_account.enqueue(account="acme", seconds=0).id,
        djtasks.five_a_second.enqueue(1).id,
        *(
            r.id
            for r in djtasks.two_an_hour.get_backend().enqueue_many(
                djtasks.two_an_hour, [(("p",), {}), ((), {"account": "q", "n": 2})]
            )
        ),
        djtasks.add.enqueue(1, 1).id,
    ]
    rows = {str(row.uuid): row for row in QueuedTask.objects.using(tasks_alias)}
    stored = [
        (
            rows[i].concurrency_key,
            rows[i].concurrency,
            rows[i].rate_key,
            rows[i].rate_limit,
            rows[i].rate_period,
        )
        for i in ids
    ]
    assert stored == [
        ("account:acme", 2, None, None, None),
        (None, None, "tests.djtasks.five_a_second", 5, 1.0),
        (None, None, "mail:p", 2, 3600.0),
        (None, None, "mail:q", 2, 3600.0),
        (None, None, None, None, None),
    ]
    # Each key's slots, made by the enqueue; none for the task without limits.
    keys = {(s.kind, s.flow_key) for s in FlowSlot.objects.using(tasks_alias)}
    assert keys == {
        ("concurrency", "account:acme"),
        ("rate", "tests.djtasks.five_a_second"),
        ("rate", "mail:p"),
        ("rate", "mail:q"),
    }
    assert FlowSlot.objects.using(tasks_alias).count() == 2 + 5 + 2 + 2


def test_one_enqueue_many_makes_the_slots_of_every_key_it_names(tasks_alias: str) -> None:
    """Keys new and seen before, one task or several a key, in one statement
    (on PostgreSQL, migration 0022's trigger runs once for all of them):
    each key gets its N slots, once, and each claimable task is claimed."""
    djtasks.both_limits.enqueue("seen", "r1")
    backend = djtasks.both_limits.get_backend()
    pairs = [("x", "r1"), ("y", "r2"), ("x", "r2"), ("seen", "r3"), ("z", "r3")]
    backend.enqueue_many(djtasks.both_limits, [(pair, {}) for pair in pairs])
    slots = sorted((s.kind, s.flow_key, s.slot) for s in FlowSlot.objects.using(tasks_alias))
    assert slots == sorted(
        [("concurrency", key, 1) for key in ("seen", "x", "y", "z")]
        + [("rate", key, n) for key in ("r1", "r2", "r3") for n in (1, 2, 3)]
    )
    # One of each concurrency key at once: "seen" and "x" once each.
    assert sorted(c.args[0] for c in claim()) == ["seen", "x", "y", "z"]
    assert held(tasks_alias) == {"seen": 1, "x": 1, "y": 1, "z": 1}
    # Enqueued again, nothing more is made.
    backend.enqueue_many(djtasks.both_limits, [(pair, {}) for pair in pairs])
    assert FlowSlot.objects.using(tasks_alias).count() == len(slots)


def test_a_raised_limit_gets_its_new_slots_at_the_next_enqueue(tasks_alias: str) -> None:
    djtasks.per_account.enqueue("a")
    wider = dataclasses.replace(djtasks.per_account, concurrency=3)
    wider.enqueue("a")
    slots = FlowSlot.objects.using(tasks_alias).filter(flow_key="account:a")
    assert sorted(slot.slot for slot in slots) == [1, 2, 3]
    for _ in range(3):
        wider.enqueue("a")
    # Two of the old limit and three of the new: the claim honours each row's.
    assert len(claim()) == 3


# --- refusals ---------------------------------------------------------------------------


def lookup(account: str, n: int = 0) -> int:
    return n


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ({"concurrency": 0}, "concurrency must be from 1 to 10000, not 0"),
        ({"concurrency": 10_001}, "concurrency must be from 1 to 10000"),
        ({"concurrency": True}, "concurrency must be a whole number, not True"),
        ({"concurrency": 2.5}, "concurrency must be a whole number, not 2.5"),
        ({"concurrency": "2"}, "concurrency must be a whole number, not '2'"),
        ({"concurrency_key": "k"}, "concurrency_key needs concurrency= too"),
        ({"rate_key": "k"}, "rate_key needs rate_limit= too"),
        ({"rate_limit": "5"}, 'rate_limit must be "N/s", "N/m" or "N/h", not \'5\''),
        ({"rate_limit": "5/d"}, "rate_limit must be"),
        ({"rate_limit": "-1/s"}, "rate_limit must be"),
        ({"rate_limit": 5}, "rate_limit must be"),
        ({"rate_limit": "0/s"}, "rate_limit allows 1 to 10000 starts per window, not 0"),
        ({"rate_limit": "10001/h"}, "not 10001"),
        (
            {"concurrency": 1, "concurrency_key": "{missing}"},
            "names 'missing', which is not a parameter of the task",
        ),
        ({"concurrency": 1, "concurrency_key": "{0}"}, "by parameter name, not by position"),
        ({"concurrency": 1, "concurrency_key": "{}"}, "by parameter name, not by position"),
        ({"concurrency": 1, "concurrency_key": "{account"}, "is not a format string"),
        ({"concurrency": 1, "concurrency_key": ""}, "must be a format string"),
        ({"concurrency": 1, "concurrency_key": 7}, "must be a format string"),
        ({"rate_limit": "1/s", "rate_key": "{nope.x}"}, "names 'nope'"),
    ],
)
def test_a_bad_option_is_an_invalid_task_at_declaration(
    refusal_alias: str, options: dict[str, Any], reason: str
) -> None:
    with pytest.raises(compat.InvalidTask, match=reason.replace("(", r"\(")) as raised:
        task(**options)(lookup)
    assert "'tests.queue.test_flow.lookup'" in str(raised.value)
    # .using()-style replacement is checked alike.
    with pytest.raises(compat.InvalidTask, match="concurrency must be"):
        dataclasses.replace(djtasks.per_account, concurrency=-1)
    assert QueuedTask.objects.using(refusal_alias).count() == 0


def test_good_options_are_accepted(refusal_alias: str) -> None:
    declared = task(
        concurrency=3, concurrency_key="{account}-{n}", rate_limit=" 10 / m ", rate_key=len
    )(lookup)
    assert (declared.concurrency, declared.rate_limit) == (3, " 10 / m ")
    assert parse_rate("7/h") == Rate(7, 3600.0)


def bad_key(account: str, n: int = 0) -> str:
    if account != "ok":
        raise LookupError(f"no account {account}")
    return account


@pytest.mark.parametrize(
    ("declared", "args", "reason"),
    [
        (
            {"concurrency": 1, "concurrency_key": bad_key},
            ("a",),
            "the concurrency_key of task 'tests.queue.test_flow.lookup' raised LookupError",
        ),
        (
            {"concurrency": 1, "concurrency_key": lambda account, n=0: account == "ok" and "k"},
            ("a",),
            "not False",
        ),
        ({"rate_limit": "1/s", "rate_key": "{account}"}, ("",), "not 0 characters"),
        ({"rate_limit": "1/s", "rate_key": "{account}"}, ("x" * 256,), "not 256 characters"),
        (
            {"concurrency": 1, "concurrency_key": "{account[1]}"},
            ("a",),
            "can't be formed from these arguments: IndexError",
        ),
    ],
)
def test_a_key_the_arguments_cant_form_is_a_type_error_with_nothing_stored(
    refusal_alias: str, declared: dict[str, Any], args: tuple[Any, ...], reason: str
) -> None:
    declared_task = task(**declared)(lookup)
    with pytest.raises(TypeError, match=reason):
        declared_task.enqueue(*args)
    backend = declared_task.get_backend()
    with pytest.raises(TypeError, match=f"item 1: .*{reason}"):
        backend.enqueue_many(declared_task, [(("ok",), {}), (args, {})])
    declared_task.enqueue("ok")  # the same task with arguments that form its key
    assert QueuedTask.objects.using(refusal_alias).count() == 1
    QueuedTask.objects.using(refusal_alias).all().delete()
    FlowSlot.objects.using(refusal_alias).all().delete()
    assert QueuedTask.objects.using(refusal_alias).count() == 0
    assert FlowSlot.objects.using(refusal_alias).count() == 0
