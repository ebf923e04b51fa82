"""The sizes and defaults more than one place needs (django_bgtasks.limits):
the columns hold the longest name and owner the checks let through, on every
engine, and an error text is cut to its length; each choice column has room
for its longest value and more; and the defaults fit their bounds (the
default owner its column, whatever the host's name; the default ttls the
range every lease operation accepts). (That no other module spells a size or
a ttl default out: tests/test_layout.py.)"""

from __future__ import annotations

import pytest

from django_bgtasks.choices import FlowLimit, Outcome, QueueStatus, Trigger
from django_bgtasks.limits import (
    DEFAULT_TTL,
    FLOW_KIND_LENGTH,
    HOST_COLUMN_LENGTH,
    HOST_LENGTH,
    MAX_ERROR_LENGTH,
    MAX_NAME_LENGTH,
    MAX_OWNER_LENGTH,
    OUTCOME_LENGTH,
    QUEUE_STATUS_LENGTH,
    TRIGGER_LENGTH,
    WORKER_TTL,
)
from django_bgtasks.models import BackgroundTask
from django_bgtasks.validation import validate_ttl
from tests.dbtools import runs


def test_the_longest_name_and_owner_are_stored_and_an_error_is_cut(db_alias: str) -> None:
    objects = BackgroundTask.objects
    name, owner = "n" * MAX_NAME_LENGTH, "o" * MAX_OWNER_LENGTH
    lease = objects.try_claim(name, owner, ttl=30)
    assert lease is not None
    state = objects.get_state(name)
    assert state is not None and (state.name, state.owner) == (name, owner)
    error = "e" * (MAX_ERROR_LENGTH + 100)
    assert objects.release(name, owner, token=lease.token, outcome=Outcome.FAILED, error=error)
    [run] = runs(db_alias, name)
    assert (run["owner"], run["error"]) == (owner, error[:MAX_ERROR_LENGTH])
    with pytest.raises(ValueError, match=f"at most {MAX_NAME_LENGTH}"):
        objects.try_claim(name + "n", owner, ttl=30)


def test_each_choice_column_has_room_for_its_longest_value_and_more() -> None:
    for choices, length in [
        (Outcome, OUTCOME_LENGTH),
        (Trigger, TRIGGER_LENGTH),
        (QueueStatus, QUEUE_STATUS_LENGTH),
        (FlowLimit, FLOW_KIND_LENGTH),
    ]:
        assert max(len(value) for value in choices.values) < length, choices


def test_the_defaults_fit_their_bounds() -> None:
    # The default owner, host:pid:hex8, with the longest host kept and a
    # Linux pid (at most 7 digits).
    longest_owner = f"{'h' * HOST_LENGTH}:{'9' * 7}:{'f' * 8}"
    assert len(longest_owner) <= MAX_OWNER_LENGTH
    assert HOST_LENGTH <= HOST_COLUMN_LENGTH
    assert validate_ttl(DEFAULT_TTL) == DEFAULT_TTL
    assert validate_ttl(WORKER_TTL) == WORKER_TTL
