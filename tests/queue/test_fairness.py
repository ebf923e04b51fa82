"""A Django Task's fair share as ``@task(...)`` declares it
(queue/fairness.py): a bad ``fairness_key`` or ``fairness_weight`` is an
``InvalidTask`` at the declaration, with nothing stored; one task's key and
weight are formed from its arguments, and a weight a callable gives badly is
a ``TypeError`` naming the task and the key. The claim takes from the keys
in turn, on every engine; claims at once, on the servers."""

from __future__ import annotations

import dataclasses
import itertools
import time
import uuid
from typing import Any

import pytest

from django_bgtasks import compat, limits
from django_bgtasks.models import QueuedTask
from django_bgtasks.queue.fairness import check_weight, share

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task  # type: ignore[no-redef]


def tenant_job(tenant_id: int, rows: int = 0) -> int:
    return rows


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ({"fairness_weight": {"t": 2}}, "fairness_weight needs fairness_key= too"),
        ({"fairness_key": ""}, "fairness_key must be a format string"),
        ({"fairness_key": 7}, "fairness_key must be a format string"),
        (
            {"fairness_key": "tenant:{missing}"},
            "names 'missing', which is not a parameter of the task",
        ),
        ({"fairness_key": "tenant:{0}"}, "by parameter name, not by position"),
        ({"fairness_key": "k", "fairness_weight": 3}, "must be a mapping of keys to whole"),
        ({"fairness_key": "k", "fairness_weight": {1: 2}}, "keys must be strings, not 1"),
        ({"fairness_key": "k", "fairness_weight": {"k": 0}}, "of key 'k': a fairness weight must"),
        ({"fairness_key": "k", "fairness_weight": {"k": 1.5}}, "must be a whole number, not 1.5"),
        (
            {"fairness_key": "k", "fairness_weight": {"k": True}},
            "must be a whole number, not True",
        ),
        (
            {"fairness_key": "k", "fairness_weight": {"k": limits.MAX_FAIRNESS_WEIGHT + 1}},
            f"from 1 to {limits.MAX_FAIRNESS_WEIGHT}, not {limits.MAX_FAIRNESS_WEIGHT + 1}",
        ),
    ],
)
def test_a_bad_fair_share_is_an_invalid_task_at_declaration(
    refusal_alias: str, options: dict[str, Any], reason: str
) -> None:
    with pytest.raises(compat.InvalidTask, match=reason) as raised:
        task(**options)(tenant_job)
    assert "'tests.queue.test_fairness.tenant_job'" in str(raised.value)
    declared = task(fairness_key="tenant:{tenant_id}")(tenant_job)
    with pytest.raises(compat.InvalidTask, match="fairness_weight needs fairness_key"):
        dataclasses.replace(declared, fairness_key=None, fairness_weight={"t": 2})
    assert QueuedTask.objects.using(refusal_alias).count() == 0


def test_a_tasks_key_and_weight_are_formed_from_its_arguments() -> None:
    plain = task()(tenant_job)
    assert share(plain, (1,), {}) is None
    keyed = task(fairness_key="tenant:{tenant_id}")(tenant_job)
    assert share(keyed, (7,), {"rows": 3}) == ("tenant:7", 1)
    mapped = task(fairness_key="tenant:{tenant_id}", fairness_weight={"tenant:7": 3})(tenant_job)
    assert share(mapped, (7,), {}) == ("tenant:7", 3)
    assert share(mapped, (8,), {}) == ("tenant:8", 1)  # a key the mapping doesn't name
    called = task(
        fairness_key=lambda tenant_id, rows=0: f"t{tenant_id}",
        fairness_weight=lambda key: 5 if key == "t1" else 1,
    )(tenant_job)
    assert share(called, (1,), {}) == ("t1", 5)
    assert share(called, (2,), {}) == ("t2", 1)


def _paid_tier(key: str) -> int:
    if key == "tenant:0":
        raise LookupError("no such tenant")
    return {"tenant:1": 0, "tenant:2": 2.5}.get(key, 1)  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("tenant", "reason"),
    [
        (0, "raised LookupError for key 'tenant:0': no such tenant"),
        (1, "for key 'tenant:1': a fairness weight must be from 1 to"),
        (2, "for key 'tenant:2': a fairness weight must be a whole number, not 2.5"),
    ],
)
def test_a_weight_a_callable_gives_badly_is_a_type_error_naming_task_and_key(
    tenant: int, reason: str
) -> None:
    declared = task(fairness_key="tenant:{tenant_id}", fairness_weight=_paid_tier)(tenant_job)
    assert share(declared, (3,), {}) == ("tenant:3", 1)
    with pytest.raises(TypeError, match=reason) as raised:
        share(declared, (tenant,), {})
    assert "'tests.queue.test_fairness.tenant_job'" in str(raised.value)


def test_a_weight_is_a_whole_number_in_range() -> None:
    assert check_weight(1) == 1
    assert check_weight(limits.MAX_FAIRNESS_WEIGHT) == limits.MAX_FAIRNESS_WEIGHT
    for bad in (0, -1, limits.MAX_FAIRNESS_WEIGHT + 1, 2.0, "2", None, False):
        with pytest.raises(ValueError, match="a fairness weight must be"):
            check_weight(bad)


def test_the_enqueue_stores_each_tasks_key_and_weight(tasks_alias: str) -> None:
    keyed = task(fairness_key="tenant:{tenant_id}", fairness_weight={"tenant:1": 3})(tenant_job)
    one = keyed.enqueue(1)
    many = keyed.get_backend().enqueue_many(keyed, [((2,), {}), ((1,), {"rows": 5})])
    plain = task()(tenant_job).enqueue(4)
    stored = {
        str(row_id): (key, weight)
        for row_id, key, weight in QueuedTask.objects.using(tasks_alias).values_list(
            "uuid", "fairness_key", "fairness_weight"
        )
    }
    assert stored == {
        str(uuid.UUID(one.id)): ("tenant:1", 3),
        str(uuid.UUID(many[0].id)): ("tenant:2", 1),
        str(uuid.UUID(many[1].id)): ("tenant:1", 3),
        str(uuid.UUID(plain.id)): (None, None),
    }


def test_a_weight_refused_at_enqueue_stores_nothing(tasks_alias: str) -> None:
    declared = task(fairness_key="tenant:{tenant_id}", fairness_weight=_paid_tier)(tenant_job)
    with pytest.raises(TypeError, match="for key 'tenant:1'"):
        declared.enqueue(1)
    with pytest.raises(TypeError, match=r"item 1: .*for key 'tenant:0'"):
        declared.get_backend().enqueue_many(declared, [((3,), {}), ((0,), {})])
    assert not QueuedTask.objects.using(tasks_alias).exists()


# --- the claim ----------------------------------------------------------------------------


def _claimed_keys(
    alias: str, claims: int, limit: int = 1, queues: tuple[str, ...] | None = ("default",)
) -> list[str]:
    """The fairness keys of the tasks ``claims`` claims of ``limit`` take, in
    the order they were claimed (of ``queues``: None, every queue)."""
    keys = []
    named = None if queues is None else list(queues)
    for _ in range(claims):
        for claim in QueuedTask.objects.claim_many("w", queues=named, limit=limit):
            keys.append(QueuedTask.objects.using(alias).get(seq=claim.seq).fairness_key)
    return keys


def _enqueue(declared: Any, tenant: int, count: int) -> None:
    declared.get_backend().enqueue_many(declared, [((tenant,), {})] * count)


def test_the_claim_takes_from_the_keys_in_turn(tasks_alias: str) -> None:
    keyed = task(fairness_key="tenant:{tenant_id}")(tenant_job)
    _enqueue(keyed, 1, 30)  # tenant 1's import first...
    _enqueue(keyed, 2, 3)
    _enqueue(keyed, 3, 3)
    # ... yet tenants 2 and 3 get a turn each in every three starts.
    first = _claimed_keys(tasks_alias, 9)
    assert sorted(first) == ["tenant:1"] * 3 + ["tenant:2"] * 3 + ["tenant:3"] * 3, first
    # A lone key gets every start, in batches too.
    assert _claimed_keys(tasks_alias, 3, limit=8) == ["tenant:1"] * 24


def test_claims_of_several_take_the_keys_in_turn(tasks_alias: str) -> None:
    """Claims of two tasks each, three keys: a claim's starts are turns too
    (a key's second task a turn after its first), so every three claims
    start each key twice."""
    keyed = task(fairness_key="tenant:{tenant_id}")(tenant_job)
    for tenant in (1, 2, 3):
        _enqueue(keyed, tenant, 20)
    started = _claimed_keys(tasks_alias, 12, limit=2)
    rounds = [started[at : at + 6] for at in range(0, len(started), 6)]
    assert all(
        sorted(round_) == ["tenant:1"] * 2 + ["tenant:2"] * 2 + ["tenant:3"] * 2
        for round_ in rounds
    ), started


def test_weights_share_the_starts_in_proportion(tasks_alias: str) -> None:
    keyed = task(fairness_key="tenant:{tenant_id}", fairness_weight={"tenant:1": 3})(tenant_job)
    _enqueue(keyed, 1, 40)
    _enqueue(keyed, 2, 40)
    for limit in (1, 4):
        started = _claimed_keys(tasks_alias, 16 // limit, limit=limit)
        assert started.count("tenant:1") == 12 and started.count("tenant:2") == 4, started


def test_priority_wins_over_the_turns(tasks_alias: str) -> None:
    keyed = task(fairness_key="tenant:{tenant_id}")(tenant_job)
    _enqueue(keyed, 1, 5)
    _enqueue(dataclasses.replace(keyed, priority=10), 2, 2)
    assert _claimed_keys(tasks_alias, 3) == ["tenant:2", "tenant:2", "tenant:1"]


def test_a_key_back_from_idle_takes_its_turn_and_banks_none(tasks_alias: str) -> None:
    """Tenant 2 ran out of work while tenant 1 ran on: back with work, it
    starts at the queue's clock, so the two take turns at once (it does not
    get the 20 turns it missed in a row)."""
    keyed = task(fairness_key="tenant:{tenant_id}")(tenant_job)
    _enqueue(keyed, 1, 40)
    _enqueue(keyed, 2, 2)
    assert sorted(_claimed_keys(tasks_alias, 4)) == ["tenant:1"] * 2 + ["tenant:2"] * 2
    # Tenant 2 has no work: tenant 1 alone takes 20 starts...
    assert _claimed_keys(tasks_alias, 20) == ["tenant:1"] * 20
    # ... and tenant 3, new, and tenant 2, back, take turns with it from now.
    _enqueue(keyed, 2, 10)
    _enqueue(keyed, 3, 10)
    started = _claimed_keys(tasks_alias, 12)
    assert [started.count(f"tenant:{t}") for t in (1, 2, 3)] == [4, 4, 4], started


def test_tasks_without_a_key_beside_keyed_ones_go_first(tasks_alias: str) -> None:
    """A queue's tasks without a fairness key are not held to the turns: at
    a priority, they start before the keyed ones, whatever their backlog."""
    keyed = task(fairness_key="tenant:{tenant_id}")(tenant_job)
    _enqueue(keyed, 1, 30)
    _enqueue(task()(tenant_job), 0, 2)
    assert _claimed_keys(tasks_alias, 3) == [None, None, "tenant:1"]


def test_a_claim_of_every_queue_keeps_the_turns_too(tasks_alias: str) -> None:
    """Claimed from every queue (the worker's default), the keys take turns,
    and the tasks without a key go first, as in a claim of named queues."""
    keyed = task(fairness_key="tenant:{tenant_id}")(tenant_job)
    _enqueue(keyed, 1, 30)
    _enqueue(keyed, 2, 3)
    _enqueue(task()(tenant_job), 0, 2)
    started = _claimed_keys(tasks_alias, 4, limit=2, queues=None)
    assert started[:2] == [None, None], started
    assert sorted(started[2:]) == ["tenant:1"] * 3 + ["tenant:2"] * 3, started


def test_a_key_with_nothing_to_start_takes_no_turn(tasks_alias: str) -> None:
    """A key whose next turn comes first, but whose tasks are not due (a
    retry's delay, say) or are held by a limit, takes no turn: the claim of
    one task takes the next key's, and does not come back empty."""
    import datetime as dt

    keyed = task(fairness_key="tenant:{tenant_id}")(tenant_job)
    later = keyed.using(run_after=dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))
    _enqueue(later, 1, 5)  # tenant 1's row of turns first, so its turn first
    _enqueue(keyed, 2, 2)
    _enqueue(keyed, 3, 2)
    limited = task(fairness_key="tenant:{tenant_id}", concurrency=1)(tenant_job)
    _enqueue(limited, 4, 3)
    started = [_claimed_keys(tasks_alias, 1) for _ in range(6)]
    # Five claims of one each take one (tenant 4 one only: its limit), the
    # sixth none: tenant 1's tasks wait for their hour.
    assert [len(keys) for keys in started] == [1, 1, 1, 1, 1, 0], started
    assert sorted(itertools.chain(*started)) == ["tenant:2"] * 2 + ["tenant:3"] * 2 + ["tenant:4"]


def test_keyed_tasks_that_cannot_start_hold_back_no_lower_priority(tasks_alias: str) -> None:
    """Priority wins over the turns among the tasks that can start: keyed
    tasks of a higher priority that are not due (a task for tomorrow), or
    that a flow limit holds, hold back no keyed task of a lower priority,
    as without keys (they had held every keyed task of the queue)."""
    import datetime as dt

    from django.db import connections

    keyed = task(fairness_key="tenant:{tenant_id}")(tenant_job)
    tomorrow = dt.datetime.now(dt.UTC) + dt.timedelta(days=1)
    _enqueue(dataclasses.replace(keyed, priority=10).using(run_after=tomorrow), 1, 2)
    _enqueue(task(fairness_key="tenant:{tenant_id}", concurrency=1, priority=5)(tenant_job), 2, 3)
    _enqueue(keyed, 3, 4)
    _enqueue(keyed, 4, 2)
    # Tenant 2's first (priority 5), then, its limit reached, tenants 3 and
    # 4 in turn (priority 0), and tenant 3 alone once 4's are gone.
    started = _claimed_keys(tasks_alias, 6)
    assert started[0] == "tenant:2", started
    assert sorted(started[1:5]) == ["tenant:3"] * 2 + ["tenant:4"] * 2, started
    assert started[5:] == ["tenant:3"], started
    # Tenant 3 is a lone key at its priority: on PostgreSQL the lone key's
    # claim takes its last task, in one statement (the tasks above it that
    # can't start don't send it on to the full claim, at every claim).
    claimed, sent = _claims_sent(
        tasks_alias, lambda: QueuedTask.objects.claim_many("w", queues=["default"], limit=1)
    )
    assert [c.priority for c in claimed] == [0]
    assert sent == ["lone"] or connections[tasks_alias].vendor != "postgresql"
    # Nothing more may start: tenant 1's wait for tomorrow, tenant 2's for its slot.
    assert _claimed_keys(tasks_alias, 1, limit=8) == []
    assert QueuedTask.objects.using(tasks_alias).filter(status="READY").count() == 4


def test_a_claim_waits_for_the_turns_another_holds_and_reads_their_newest(
    server_alias: str,
) -> None:
    """A key's row of turns locked by another transaction (as a claim at
    once holds it) makes the claim wait, and the claim then orders the turns
    by the row's newest values (what its lock returns), not by those its
    statement's snapshot read: tenant 2 moved on by 10 turns meanwhile, so
    tenant 1 takes all 8 starts; by the snapshot's turns they would have
    shared them."""
    import threading

    from django.db import connections

    from django_bgtasks.models import FairShare

    keyed = task(fairness_key="tenant:{tenant_id}")(tenant_job)
    for tenant in (1, 2):
        _enqueue(keyed, tenant, 30)
    other = connections.create_connection(server_alias)
    claimed: list[list[str]] = []

    def claim() -> None:
        try:
            claimed.append(_claimed_keys(server_alias, 1, limit=8))
        finally:
            connections.close_all()

    try:
        with other.cursor() as cursor:
            cursor.execute("START TRANSACTION")
            cursor.execute(
                f"UPDATE {FairShare._meta.db_table} SET vtime = 10 WHERE fairness_key = 'tenant:2'"
            )
            claimer = threading.Thread(target=claim)
            claimer.start()
            claimer.join(1.0)
            assert claimer.is_alive() and not claimed, "the claim did not wait for the turns"
            cursor.execute("COMMIT")
        claimer.join(30)
    finally:
        other.close()
    assert claimed == [["tenant:1"] * 8], claimed


def test_claimers_at_once_take_the_keys_in_turn(server_alias: str) -> None:
    """Four threads, each on its own connection, claiming one task at a time:
    by the database's order of starts, the three keys share every window of
    starts (no key runs ahead while the others wait)."""
    import threading

    from django.db import connections

    keyed = task(fairness_key="tenant:{tenant_id}")(tenant_job)
    for tenant in (1, 2, 3):
        _enqueue(keyed, tenant, 60)

    def claimer(name: str) -> None:
        deadline = time.monotonic() + 60
        try:
            while QueuedTask.objects.using(server_alias).filter(status="READY").exists():
                assert time.monotonic() < deadline, "the claims took too long"
                QueuedTask.objects.claim_many(name, queues=["default"], limit=1)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=claimer, args=(f"w{n}",)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    started = list(
        QueuedTask.objects.using(server_alias)
        .order_by("started_at", "seq")
        .values_list("fairness_key", flat=True)
    )
    assert len(started) == 180
    # While every key has ready tasks (to the first key's last start), the
    # starts come in rounds, one of each key: no key starts twice in a row,
    # and each has 4 of every 12 starts. (Claims lock every competing key's
    # turn and order them by their newest values. When they skipped the keys
    # other claims held instead, a key started twice in a row in most runs,
    # and 4 times in about 1 run in 10.)
    busy = started[
        : min(max(i for i, key in enumerate(started) if key == k) for k in set(started))
    ]
    runs = [1]
    for before, after in itertools.pairwise(busy):
        runs.append(runs[-1] + 1 if after == before else 1)
    assert max(runs) == 1, busy
    windows = [busy[at : at + 12] for at in range(0, len(busy) - 11, 12)]
    counts = [[window.count(f"tenant:{t}") for t in (1, 2, 3)] for window in windows]
    assert len(windows) >= 13 and all(count == [4, 4, 4] for count in counts), counts


# --- the plain claim ----------------------------------------------------------------------
# On PostgreSQL, a worker sends the claim its last claim of its queues named:
# without the turns where they had no keyed task, or a lone key
# (queue/manager.py's _NEXT_CLAIM, db/shared.py's plain_claim and lone_claim).
# The guess may be wrong: what a claim takes must not depend on it.


def _claims_sent(alias: str, claim: Any) -> tuple[Any, list[str]]:
    """What ``claim()`` returns, and the claims it sent on ``alias``, in
    order: "plain", "lone" or "full" (on PostgreSQL; elsewhere the one claim)."""
    from django.db import connections
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connections[alias]) as queries:
        result = claim()
    sent = [q["sql"] for q in queries.captured_queries if "claimed_at" in q["sql"]]
    kinds = {(True, False): "plain", (True, True): "lone", (False, False): "full"}
    return result, [kinds["picked AS" in sql, "lone AS" in sql] for sql in sent]


def _positions(alias: str, queue: str, claims: list[Any]) -> list[int]:
    """Where each of ``claims`` stands in its queue's enqueue order."""
    order = list(
        QueuedTask.objects.using(alias)
        .filter(queue_name=queue)
        .order_by("seq")
        .values_list("seq", flat=True)
    )
    return sorted(order.index(claim.seq) for claim in claims)


def test_a_claim_takes_the_same_tasks_whatever_its_guess_of_keys(
    tasks_alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two queues alike: a task without a key, keyed tasks of two tenants,
    then tasks without a key. Claimed with the guess "no keys" (queue
    default) and with the guess "keys" (queue other), each claim takes the same tasks: the
    plain claim stops at the first keyed task and the full one takes the
    rest in the same statement's turn. From then on a's claims are full
    ones, until one sees no keyed task left; then plain ones again."""
    from django.db import connections

    from django_bgtasks.queue import manager

    monkeypatch.setattr(manager, "_NEXT_CLAIM", {})
    keyed = task(fairness_key="tenant:{tenant_id}")(tenant_job)
    for queue in ("default", "other"):
        plain, tenants = task(queue_name=queue)(tenant_job), keyed.using(queue_name=queue)
        _enqueue(plain, 0, 1)
        _enqueue(tenants, 1, 3)
        _enqueue(tenants, 2, 3)
        _enqueue(plain, 0, 2)
    manager._NEXT_CLAIM[(tasks_alias, False, ("other",))] = "full"
    # (Elsewhere the claim is one, whatever the guess: what it takes is checked alike.)
    on_postgresql = connections[tasks_alias].vendor == "postgresql"

    def claim(queue: str, limit: int) -> Any:
        return lambda: QueuedTask.objects.claim_many("w", queues=[queue], limit=limit)

    guessed, sent = _claims_sent(tasks_alias, claim("default", 4))
    full, _ = _claims_sent(tasks_alias, claim("other", 4))
    # The three tasks without a key first, then tenant 1's first.
    assert _positions(tasks_alias, "default", guessed) == _positions(tasks_alias, "other", full)
    assert _positions(tasks_alias, "default", guessed) == [0, 1, 7, 8]
    # The plain claim left tenant 1's, the lone key's claim too (two keys).
    assert sent == ["plain", "lone", "full"] or not on_postgresql
    # Two keys seen, default's next claims are full ones; both queues drain
    # alike. The fifth reads tenant 2 alone, a lone key: the lone key's
    # claim next, which finds no keyed task left and names the plain one.
    kinds = []
    for _ in range(5):
        guessed, sent = _claims_sent(tasks_alias, claim("default", 1))
        full, _ = _claims_sent(tasks_alias, claim("other", 1))
        assert len(guessed) == 1
        assert _positions(tasks_alias, "default", guessed) == _positions(
            tasks_alias, "other", full
        )
        kinds.extend(sent)
    _enqueue(task()(tenant_job), 0, 1)
    claimed, sent = _claims_sent(tasks_alias, claim("default", 1))
    assert len(claimed) == 1
    assert kinds + sent == ["full"] * 5 + ["lone"] or not on_postgresql
    assert _claims_sent(tasks_alias, claim("default", 1))[1] == ["plain"] or not on_postgresql


def test_a_lone_keys_tasks_are_claimed_plain_after_those_without_a_key(
    tasks_alias: str,
) -> None:
    """One tenant's import in a queue of its own: the lone key's claim takes
    its tasks (no turns to keep), after the tasks without a key of another
    queue at their priority, enqueued later, as the full claim does. A task
    without a key in the tenant's queue makes it the full claim's again
    (that task first), until a claim sees the key alone once more."""
    from django.db import connections

    vendor = connections[tasks_alias].vendor
    _enqueue(task(fairness_key="tenant:{tenant_id}")(tenant_job), 1, 6)
    _enqueue(task(queue_name="other")(tenant_job), 0, 2)

    def claim(limit: int) -> Any:
        return lambda: QueuedTask.objects.claim_many("w", queues=["default", "other"], limit=limit)

    claimed, sent = _claims_sent(tasks_alias, claim(4))
    first = [(c.queue_name, _positions(tasks_alias, c.queue_name, [c])) for c in claimed]
    if vendor == "mysql":
        # MariaDB claims a queue whose ready tasks have one key by its plain
        # pick, in enqueue order across queues (db/mysql/mariadb.py's _KEYED).
        assert first == [("default", [n]) for n in range(4)]
        return
    assert first == [("default", [0]), ("default", [1]), ("other", [0]), ("other", [1])]
    assert sent == ["plain", "lone"] or vendor != "postgresql"
    _enqueue(task()(tenant_job), 0, 1)
    claimed, sent = _claims_sent(tasks_alias, claim(2))
    assert [_positions(tasks_alias, "default", [c]) for c in claimed] == [[2], [6]]
    assert sent == ["lone", "full"] or vendor != "postgresql"
    for expected in (["full"], ["lone"]):
        claimed, sent = _claims_sent(tasks_alias, claim(1))
        assert len(claimed) == 1 and claimed[0].queue_name == "default"
        assert sent == expected or vendor != "postgresql"
    assert QueuedTask.objects.using(tasks_alias).filter(status="READY").count() == 1


def test_a_claim_that_guessed_no_keys_takes_a_higher_priority_keyed_task(
    tasks_alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plain claim's first candidate is keyed (a higher priority): it
    takes nothing and the full claim takes that task, not the tasks without
    a key behind it; so too when the claim comes with a run's end."""
    from django_bgtasks.queue import manager

    monkeypatch.setattr(manager, "_NEXT_CLAIM", {})
    _enqueue(task()(tenant_job), 0, 3)
    first = QueuedTask.objects.claim_many("w", queues=["default"], limit=1)
    assert [claim.priority for claim in first] == [0]
    urgent = task(fairness_key="tenant:{tenant_id}", priority=10)(tenant_job)
    _enqueue(urgent, 1, 1)
    end = manager.Ending(first[0].seq, "w", first[0].token, "SUCCESSFUL")
    ended, claimed = QueuedTask.objects.finish_and_claim([end], "w", queues=["default"], limit=1)
    assert list(ended) == [first[0].seq]
    assert [(claim.priority, claim.seq > first[0].seq + 2) for claim in claimed] == [(10, True)]
    # Again with the guess "no keys", and a claim alone.
    manager._NEXT_CLAIM.clear()
    _enqueue(urgent, 2, 1)
    assert [
        claim.priority for claim in QueuedTask.objects.claim_many("w", queues=["default"], limit=2)
    ] == [10, 0]
