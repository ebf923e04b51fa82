"""The names of every state (django_bgtasks.choices): each ``Status``'s slug
is the class of its badge in the admin's CSS; what a holder may record when
it ends its run is stored and read back as it is, on every engine; and a
Django Task's ``QueueStatus`` is a status of Django's Tasks framework.
(That no other module spells a state out: tests/test_layout.py.)"""

from __future__ import annotations

import re
from pathlib import Path

from django_bgtasks import compat
from django_bgtasks.choices import (
    HOLDER_OUTCOMES,
    Outcome,
    QueueStatus,
    Status,
)
from django_bgtasks.models import BackgroundTask
from tests.dbtools import runs

ADMIN_CSS = Path(__file__).parent.parent / "django_bgtasks/static/django_bgtasks/admin.css"


def test_a_status_s_slug_is_the_class_of_its_badge() -> None:
    assert Status.CANCEL_REQUESTED.slug == "cancel-requested"
    styled = set(re.findall(r"\.bgtasks-status-([\w-]+)", ADMIN_CSS.read_text()))
    slugs = {status.slug for status in Status}
    # Every status has its badge's colour but idle, the plain one; no style is left
    # for a status that is gone.
    assert slugs - {Status.IDLE.slug} <= styled <= slugs


def test_what_a_holder_may_record_is_stored_and_read_back_as_it_is(db_alias: str) -> None:
    objects = BackgroundTask.objects
    for outcome in sorted(HOLDER_OUTCOMES):
        lease = objects.try_claim("job", "worker-1", ttl=30)
        assert lease is not None
        assert objects.release("job", "worker-1", token=lease.token, outcome=outcome)
        state = objects.get_state("job")
        assert state is not None and state.outcome == outcome
    assert [run["outcome"] for run in runs(db_alias, "job")] == sorted(HOLDER_OUTCOMES)
    # The others are the database's (lost) and an operator's to record.
    assert set(Outcome) - HOLDER_OUTCOMES == {Outcome.LOST, Outcome.RELEASED_BY_OPERATOR}


def test_a_queue_status_is_a_status_of_django_s_tasks_framework() -> None:
    for status in QueueStatus:
        assert compat.TaskResultStatus(status.value).value == status.value
