"""Fuzzed inputs and a stateful model of the lease, with Hypothesis, against
every real database.

* Arbitrary names, owners, ttls, values (deep, huge, non-JSON) and tokens
  thrown at the manager API end in success or a clear ``ValueError`` /
  ``TypeError``: never a database error, another exception, or a partial
  write. A value that is accepted reads back as JSON would round-trip it.
* The JSON API gets arbitrary path segments and bodies (JSON, forms, bytes),
  and the ``bgtasks`` command arbitrary arguments: the answer is a 2xx or a
  4xx, or success or a ``CommandError``; never a 500, an exception, or a
  write for a request that was refused.
* A RuleBasedStateMachine drives claim, update, heartbeat, release,
  force_release, request_cancel, expire_stale and backdated staleness
  against a plain-Python reference model of the lease, and compares every
  answer and, after every step, the row and the run history.

Examples per test come from the Hypothesis profile in conftest.py: modest
for CI, far more under ``BGTASKS_SOAK=1``.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import traceback
from dataclasses import dataclass, field
from io import StringIO
from typing import Any
from urllib.parse import quote, unquote

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, transaction
from django.test import Client
from django.urls import Resolver404, resolve
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from django_bgtasks.core.leases import default_owner
from django_bgtasks.models import BackgroundTask, TaskRun
from tests.dbtools import backdate, rows, runs

objects = BackgroundTask.objects

# The db_alias fixture is function-scoped on purpose: every example of a test
# shares its database, and each example compares the database before and after.
FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# --- strategies ------------------------------------------------------------------------

any_text = st.text(st.characters(codec=None), max_size=220)  # NUL, controls, surrogates
good_text = st.text(
    st.characters(blacklist_categories=("Cc", "Cs", "Zs", "Zl", "Zp")), min_size=1, max_size=30
)
junk = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.binary(max_size=10),
    st.lists(st.integers(), max_size=2),
    st.builds(object),
)
names = st.one_of(
    good_text.filter(lambda n: "/" not in n),
    any_text,
    st.sampled_from(
        ["", " ", "a" * 200, "a" * 201, "a/b", ".", "..", "<script>alert(1)</script>"]
    ),
    junk,
)
owners = st.one_of(good_text, any_text, st.just("o" * 201), junk)
ttls = st.one_of(
    st.none(),
    st.floats(),
    st.integers(),
    st.integers(min_value=10**300, max_value=10**400),  # beyond any float
    st.sampled_from([0, -0.0, 5e-324, 1e-9, 86400, 86400.000001, 10**400]),
    st.booleans(),
    st.text(max_size=5),
)
tokens = st.one_of(
    st.none(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, 2**63 - 1, 2**63, -1]),
    st.booleans(),
    st.floats(),
    st.text(max_size=5),
)


def nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = {"d": value}
    return value


json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(),  # NaN and infinities: not JSON
    st.text(st.characters(codec=None), max_size=20),  # NUL and surrogates too
)
values = st.one_of(
    st.recursive(
        json_leaves,
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.tuples(children, children),
            st.dictionaries(
                st.one_of(st.text(max_size=8), st.integers(), st.booleans(), st.none()),
                children,
                max_size=4,
            ),
        ),
        max_leaves=20,
    ),
    st.integers(min_value=90, max_value=110).map(nested),  # around the depth limit
    st.integers(min_value=(1 << 20) - 64, max_value=(1 << 20) + 64).map(lambda n: "x" * n),
    st.sampled_from([10**4000, 10**5000, 1.5e300, -0.0, 5e-324]),
    junk.map(lambda leaf: {"leaf": leaf}),
    st.builds(lambda: {1, 2}),
    st.builds(lambda: {("a", "b"): 1}),
)


# --- checking an outcome ------------------------------------------------------------------


def snapshot(alias: str) -> Any:
    return rows(alias), runs(alias)


def attempt(alias: str, call: Any) -> tuple[Any, BaseException | None]:
    """``call()``: its result, or the clear error it raised, in which case
    nothing at all may have been written. Anything else fails the test."""
    before = snapshot(alias)
    try:
        return call(), None
    except (ValueError, TypeError) as exc:
        error: BaseException = exc
    except DatabaseError as exc:  # the failure being hunted
        pytest.fail(f"a database error reached the caller: {exc!r}")
    assert str(error), "an error must say what was wrong"
    assert snapshot(alias) == before, f"{error!r} was raised after a partial write"
    # Raised by the package's checks, not by the driver on its way to the
    # database (psycopg's UnicodeEncodeError is a ValueError too).
    frames = [frame.f_code.co_filename for frame, _ in traceback.walk_tb(error.__traceback__)]
    assert not any(f"{os.sep}django{os.sep}db{os.sep}" in path for path in frames), (
        f"{error!r} came from the database layer"
    )
    return None, error


def same_json(stored: Any, given: Any) -> bool:
    """Does ``stored`` read back as JSON would round-trip ``given``?
    (jsonb keeps numbers as decimals, so 1.5e300 may come back as an int.)"""
    expected = json.loads(json.dumps(given))
    return _same(stored, expected)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


# --- the manager API -----------------------------------------------------------------------


@FUZZ
@given(name=names, owner=owners, value=values, ttl=ttls)
# What earlier runs found, kept so that every run tries them.
@example(name="huge-ttl", owner="o", value=None, ttl=10**400)
@example(name="huge-progress", owner="o", value={"done": 10**400, "total": 3}, ttl=60)
@example(name="huge-progress-2", owner="o", value={"progress": -(10**309)}, ttl=60)
def test_try_claim_with_anything(
    db_alias: str, name: Any, owner: Any, value: Any, ttl: Any
) -> None:
    lease, error = attempt(db_alias, lambda: objects.try_claim(name, owner, value, ttl=ttl))
    if error is None and lease is not None:
        state = objects.get_state(name)
        # What the API, the admin and the command show must never fail.
        json.dumps(state.as_json(), allow_nan=False)
        expected_owner = default_owner() if owner is None else owner
        assert (state.owner, state.token) == (expected_owner, lease.token)
        # A ttl of a tenth of a second (the least) is valid, and may expire at once.
        assert state.running or (state.stale and state.ttl < 1), state
        assert same_json(state.value, value), (state.value, value)
        assert state.ttl == float(ttl if ttl is not None else 120)


_fresh = iter(range(sys.maxsize))


@FUZZ
@given(
    owner=owners,
    token=tokens,
    value=values,
    outcome=st.sampled_from(["succeeded", "failed", "cancelled", "lost", "", None, 3]),
)
def test_holder_writes_with_anything(
    db_alias: str, owner: Any, token: Any, value: Any, outcome: Any
) -> None:
    name = f"held-{next(_fresh)}"
    lease = objects.try_claim(name, "holder", {"start": True}, ttl=600)
    assert lease is not None
    holds = owner == "holder" and token in (None, lease.token) and token is not True

    updated, error = attempt(
        db_alias, lambda: objects.update_state(name, owner, value, token=token)
    )
    if error is None:
        assert updated is holds
        expected = value if updated else {"start": True}
        state = objects.get_state(name)
        assert same_json(state.value, expected)
        json.dumps(state.as_json(), allow_nan=False)
    beat, error = attempt(db_alias, lambda: objects.heartbeat(name, owner, token=token))
    if error is None:
        assert beat is holds
    released, error = attempt(
        db_alias,
        lambda: objects.release(name, owner, value, token=token, outcome=outcome),
    )
    state = objects.get_state(name)
    if error is None:
        assert released is holds
        assert state.running is not released
        assert [run["outcome"] for run in runs(db_alias, name)] == ([outcome] if released else [])
    else:
        assert state.running


@FUZZ
@given(name=names, owner=owners, token=tokens)
def test_reads_fences_and_operator_actions_with_anything(
    db_alias: str, name: Any, owner: Any, token: Any
) -> None:
    attempt(db_alias, lambda: objects.get_state(name))
    attempt(db_alias, lambda: objects.request_cancel(name))
    attempt(db_alias, lambda: objects.force_release(name))

    def fence() -> bool:
        with transaction.atomic(using=db_alias):
            return objects.fence(name, owner, token)

    result, error = attempt(db_alias, fence)
    if error is None:
        assert result is False  # nothing is held in this test


# --- the JSON API and the command ------------------------------------------------------------

# Registered tasks that finish at once (tests/testapp/tasks.py), names that
# never ran, one that is held, and anything at all.
HELD = "held-by-worker"
surface_names = st.one_of(
    st.sampled_from(["surface-quick", "surface-fails", HELD, "never-ran", ".", "..", "a" * 201]),
    any_text,
)
ttl_texts = st.one_of(
    st.sampled_from(["30", "0", "-1", "nan", "inf", "1e999", "1e-320", "86401", "", "x"]),
    st.text(max_size=8),
)


def _jsonable(value: Any) -> Any:
    """``value`` if json.dumps takes it (NaN included, as Python's does), else text."""
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return "not JSON"
    return value


json_bodies = st.one_of(
    st.fixed_dictionaries({}, optional={"ttl": ttls.map(_jsonable), "extra": json_leaves}),
    values.map(_jsonable),
).map(lambda body: json.dumps(body).encode())
form_bodies = st.dictionaries(
    st.sampled_from(["ttl", "csrfmiddlewaretoken", "other"]), ttl_texts, max_size=3
)


def _threads_settled(before: set[threading.Thread]) -> None:
    """Wait for the task threads a request started (``.start()``), so that
    none writes during the next example."""
    for thread in set(threading.enumerate()) - before:
        thread.join(timeout=30)
        assert not thread.is_alive(), f"{thread.name} did not finish"


@pytest.fixture
def operator(make_staff: Any) -> Client:
    client = Client()
    client.force_login(make_staff("operator", "view_backgroundtask", "change_backgroundtask"))
    objects.try_claim(HELD, "worker-1", {"note": "held"}, ttl=3600)
    return client


API_STATUSES = {
    ("get", ""): {200, 400, 404},
    ("post", "run/"): {202, 400, 404, 409},
    ("post", "cancel/"): {202, 400, 404, 409},
}


@FUZZ
@given(
    name=surface_names,
    endpoint=st.sampled_from(sorted(API_STATUSES)),
    body=st.one_of(json_bodies, st.binary(max_size=40), form_bodies),
)
@example(name="\ud800", endpoint=("get", ""), body=b"{}")
@example(name="caf\xe9 \u2028", endpoint=("post", "cancel/"), body=b"{}")
def test_the_json_api_with_anything(
    site_alias: str, operator: Client, name: str, endpoint: tuple[str, str], body: Any
) -> None:
    method, suffix = endpoint
    # A lone surrogate can't be UTF-8; a client could still send its bytes.
    segment = quote(name.encode("utf-8", "surrogatepass"), safe="")
    url = f"/bgtasks/{segment}/{suffix}"
    before, threads = snapshot(site_alias), set(threading.enumerate())
    if method == "get":
        response = operator.get(url)
    elif isinstance(body, dict):
        response = operator.post(url, body)
    else:
        response = operator.post(url, body, content_type="application/json")
    _threads_settled(threads)

    if response.status_code == 404 and response["Content-Type"].startswith("text/html"):
        # Django's own 404, for a path no API URL matches ("" or a "/" in the
        # name: "%2F" is decoded before routing).
        with pytest.raises(Resolver404):
            resolve(unquote(url))
        return
    assert response.status_code in API_STATUSES[endpoint], (response, response.content)
    assert response["Content-Type"] == "application/json"
    data = response.json()
    if response.status_code >= 400:
        assert set(data) <= {"error", "state"} and data["error"]
        assert snapshot(site_alias) == before, "a refused request wrote something"


tokens_texts = st.one_of(tokens.map(str), st.text(max_size=6))
command_args = st.one_of(
    st.tuples(st.just("list"), st.sampled_from([[], ["--json"], ["--no-color"]])),
    st.tuples(st.just("show"), st.tuples(surface_names, st.sampled_from(["", "--json"]))),
    st.tuples(st.just("cancel"), st.tuples(surface_names)),
    st.tuples(
        st.just("release"),
        st.tuples(surface_names, st.sampled_from(["", "--force"]), tokens_texts),
    ),
    st.tuples(st.just("prune"), st.tuples(ttl_texts, st.sampled_from(["", "--dry-run"]))),
    st.tuples(st.just("watch"), st.tuples(ttl_texts, st.sampled_from(["1", "0", "-1", "x"]))),
    st.tuples(st.just("run"), st.tuples(surface_names, ttl_texts)),
)


def _argv(subcommand: str, parts: Any) -> list[str]:
    if subcommand == "list":
        return ["list", *parts]
    if subcommand == "show":
        return ["show", parts[0], *([parts[1]] if parts[1] else [])]
    if subcommand == "cancel":
        return ["cancel", parts[0]]
    if subcommand == "release":
        name, force, token = parts
        return ["release", name, *([force] if force else []), f"--token={token}"]
    if subcommand == "prune":
        return ["prune", f"--days={parts[0]}", *([parts[1]] if parts[1] else [])]
    if subcommand == "watch":
        # Always with --iterations: without it, watch runs until Ctrl-C.
        return ["watch", f"--interval={parts[0]}", f"--iterations={parts[1]}"]
    return ["run", parts[0], f"--ttl={parts[1]}"]


@FUZZ
@given(command=command_args, use_token=st.booleans())
# What earlier runs found, kept so that every run tries them.
@example(command=("prune", ("nan", "")), use_token=False)
@example(command=("prune", ("1e300", "--dry-run")), use_token=False)
@example(command=("watch", ("inf", "2")), use_token=False)
@example(command=("watch", ("1e300", "2")), use_token=False)
def test_the_command_with_anything(
    db_alias: str, command: tuple[str, Any], use_token: bool
) -> None:
    objects.try_claim(HELD, "worker-1", {"note": "held"}, ttl=3600)
    argv = _argv(*command)
    if argv[0] == "release" and not use_token:
        argv = argv[:-1]
    if argv[0] == "run" and argv[1] == "surface-fails":
        argv[1] = "surface-quick"  # a failing run is an error after writes, by design
    before, threads = snapshot(db_alias), set(threading.enumerate())
    out, err = StringIO(), StringIO()
    try:
        call_command("bgtasks", *argv, stdout=out, stderr=err, no_color=True)
    except CommandError as exc:
        error: CommandError | None = exc
    else:
        error = None
    _threads_settled(threads)
    if error is None:
        if "--json" in argv:
            json.loads(out.getvalue())
        return
    assert str(error), "a CommandError must say what was wrong"
    if argv[0] == "run" and str(error).startswith("'surface-quick'"):
        return  # it ran and ended badly (a tiny --ttl: lost); history records that
    assert snapshot(db_alias) == before, f"{argv} failed after writing"


# --- a stateful model of the lease -----------------------------------------------------------

NAMES = ("alpha", "beta")
OWNERS = ("o1", "o2")
TTLS = (30.0, 60.0, 3600.0)  # long enough that real time never expires a lease


@dataclass
class ModelRow:
    owner: str
    token: int
    ttl: float
    value: Any
    running: bool = True
    stale: bool = False
    cancel_requested: bool = False
    outcome: str = ""

    @property
    def live(self) -> bool:
        return self.running and not self.stale


@dataclass
class Model:
    """The lease as the design says it behaves: per name, one row, and a
    history of ended runs by token."""

    rows: dict[str, ModelRow] = field(default_factory=dict)
    history: dict[str, dict[int, str]] = field(default_factory=dict)

    def holds(self, name: str, owner: str, token: int | None) -> bool:
        row = self.rows.get(name)
        return (
            row is not None
            and row.live
            and row.owner == owner
            and (token is None or token == row.token)
        )

    def end(self, name: str, outcome: str) -> None:
        row = self.rows[name]
        row.running, row.outcome = False, outcome
        self.history.setdefault(name, {})[row.token] = outcome


class LeaseMachine(RuleBasedStateMachine):
    """Drives the real manager and the model side by side."""

    alias = "default"
    issued = Bundle("issued")  # (name, token) of every claim, current or not

    @initialize()
    def empty_tables(self) -> None:
        TaskRun.objects.using(self.alias).all().delete()
        BackgroundTask.objects.using(self.alias).all().delete()
        self.model = Model()

    def token_for(self, name: str, choice: str, issued: tuple[str, int] | None) -> int | None:
        row = self.model.rows.get(name)
        if choice == "none":
            return None
        if choice == "current" and row is not None:
            return row.token
        if choice == "issued" and issued is not None:
            return issued[1]
        return 10**9  # never handed out

    @rule(
        target=issued,
        name=st.sampled_from(NAMES),
        owner=st.sampled_from(OWNERS),
        value=st.integers(0, 9),
        ttl=st.sampled_from(TTLS),
    )
    def claim(self, name: str, owner: str, value: int, ttl: float) -> Any:
        lease = objects.try_claim(name, owner, {"v": value}, ttl=ttl)
        row = self.model.rows.get(name)
        if row is None or not row.live:
            if row is not None and row.running:  # taken over while stale
                self.model.end(name, "lost")
            token = 1 if row is None else row.token + 1
            assert lease is not None and lease.token == token, (lease, row)
            self.model.rows[name] = ModelRow(owner, token, ttl, {"v": value})
            return (name, token)
        assert lease is None, (lease, row)
        return (name, row.token)

    @rule(
        name=st.sampled_from(NAMES),
        owner=st.sampled_from(OWNERS),
        choice=st.sampled_from(["current", "issued", "none", "never"]),
        issued=issued,
        value=st.none() | st.integers(0, 9),
    )
    def renew(
        self, name: str, owner: str, choice: str, issued: tuple[str, int], value: int | None
    ) -> None:
        token = self.token_for(name, choice, issued)
        holds = self.model.holds(name, owner, token)
        if value is None:
            renewal = objects.renew(name, owner, token=token)
        else:
            renewal = objects.renew(name, owner, token=token, value={"v": value})
        assert (renewal is not None) is holds
        if renewal is not None:
            row = self.model.rows[name]
            assert renewal.cancel_requested is row.cancel_requested
            if value is not None:
                row.value = {"v": value}

    @rule(
        name=st.sampled_from(NAMES),
        owner=st.sampled_from(OWNERS),
        choice=st.sampled_from(["current", "issued", "none", "never"]),
        issued=issued,
        final=st.none() | st.integers(0, 9),
        outcome=st.sampled_from(["succeeded", "failed", "cancelled"]),
    )
    def release(
        self,
        name: str,
        owner: str,
        choice: str,
        issued: tuple[str, int],
        final: int | None,
        outcome: str,
    ) -> None:
        token = self.token_for(name, choice, issued)
        holds = self.model.holds(name, owner, token)
        value = None if final is None else {"v": final}
        assert objects.release(name, owner, value, token=token, outcome=outcome) is holds
        if holds:
            if value is not None:
                self.model.rows[name].value = value
            self.model.end(name, outcome)

    @rule(name=st.sampled_from(NAMES))
    def force_release(self, name: str) -> None:
        row = self.model.rows.get(name)
        expected = row is not None and row.running  # stale or not
        assert objects.force_release(name) is expected
        if expected:
            self.model.end(name, "released-by-operator")

    @rule(name=st.sampled_from(NAMES))
    def request_cancel(self, name: str) -> None:
        row = self.model.rows.get(name)
        expected = row is not None and row.live
        assert objects.request_cancel(name) is expected
        if expected:
            assert row is not None
            row.cancel_requested = True

    @precondition(lambda self: self.model.rows)
    @rule(data=st.data())
    def heartbeat_goes_stale(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.model.rows)))
        row = self.model.rows[name]
        backdate(self.alias, name, row.ttl + 5)
        row.stale = True

    @rule()
    def expire_stale(self) -> None:
        expected = [name for name, row in self.model.rows.items() if row.running and row.stale]
        assert objects.expire_stale() == len(expected)
        for name in expected:
            self.model.end(name, "lost")

    @invariant()
    def database_matches_model(self) -> None:
        if not hasattr(self, "model"):
            return
        for name in NAMES:
            state = objects.get_state(name)
            row = self.model.rows.get(name)
            if row is None:
                assert state is None
                continue
            assert state is not None
            assert (
                state.owner,
                state.token,
                state.ttl,
                state.running,
                state.stale,
                state.value,
                state.cancel_requested,
                state.outcome,
            ) == (
                row.owner,
                row.token,
                row.ttl,
                row.live,
                row.running and row.stale,
                row.value,
                row.cancel_requested,
                row.outcome,
            ), name
            recorded = {run["token"]: run["outcome"] for run in runs(self.alias, name)}
            assert recorded == self.model.history.get(name, {}), name


def test_the_lease_behaves_like_its_model(db_alias: str) -> None:
    LeaseMachine.alias = db_alias
    run_state_machine_as_test(
        LeaseMachine,
        settings=settings(
            max_examples=max(5, settings.default.max_examples // 4),
            stateful_step_count=30,
            deadline=None,
        ),
    )


def test_the_json_comparison_is_not_vacuous() -> None:
    assert same_json(15 * 10**299, 1.5e300)
    assert same_json({"1": [1, 2]}, {1: (1, 2)})
    assert not same_json({"a": 1}, {"a": 2})
    assert not same_json(True, 1)
    assert not same_json([1], [1, 1])
    assert math.isnan(float("nan"))
