"""The flush that ends each transactional test (tests/flush.py) empties every
table but the content types and permissions, on every engine: a test that
left rows behind would otherwise hand them to the next."""

from __future__ import annotations

import uuid

from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connections

from django_bgtasks.models import BackgroundTask, QueuedTask
from tests import flush
from tests.dbtools import a_worker_runs


def counts(alias: str) -> dict[str, int]:
    connection = connections[alias]
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        found = {}
        for table in connection.introspection.django_table_names(only_existing=True):
            cursor.execute(f"SELECT COUNT(*) FROM {quote(table)}")
            found[table] = cursor.fetchone()[0]
    return found


def test_the_flush_empties_every_table_but_the_content_types_and_permissions(
    db_alias: str, django_user_model: type
) -> None:
    objects = BackgroundTask.objects
    lease = objects.try_claim("cleanup", "a", {"phase": "start"}, ttl=30)
    assert lease is not None and objects.release("cleanup", "a", {}, token=lease.token)
    a_worker_runs("cleanup")
    django_user_model.objects.db_manager(db_alias).create_user("someone")
    QueuedTask.objects.using(db_alias).create(
        uuid=uuid.uuid4(), task_path="tests.djtasks.noop", backend="default",
        queue_name="default", args_kwargs={"args": [], "kwargs": {}},
    )  # fmt: skip
    kinds = ContentType.objects.using(db_alias).count()
    permissions = Permission.objects.using(db_alias).count()
    before = counts(db_alias)
    written = {table for table, count in before.items() if count} - flush.KEPT
    assert {"django_bgtasks_backgroundtask", "django_bgtasks_taskrun", "auth_user"} <= written
    assert {"django_bgtasks_queuedtask", "django_bgtasks_worker"} <= written

    flush.flush(db_alias)

    after = counts(db_alias)
    assert {table for table, count in after.items() if count} == set(flush.KEPT)
    assert ContentType.objects.using(db_alias).count() == kinds > 0
    assert Permission.objects.using(db_alias).count() == permissions > 0
