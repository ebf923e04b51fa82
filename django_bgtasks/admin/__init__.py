"""The admin: a live view of every task's lease, with run now, request cancel
and force release.

Status, staleness and heartbeat ages come from ``list_states()``/``get_state()``,
which use the database's clock, so every replica shows the same page.
``static/django_bgtasks/live.js`` keeps the rows current: pushed by the
event stream where the page is served under ASGI, else by polling the
``status/`` URL here (the same JSON as the API, behind the admin's login).

* :mod:`.options`: :class:`BackgroundTaskAdmin`, the ModelAdmin (configuration,
  permissions, pages, actions, URLs);
* :mod:`.columns`: what each column and detail field shows;
* :mod:`.changelist`: the changelist's rows (with the registered tasks that
  never ran) and its status filter;
* :mod:`.queued`: :class:`QueuedTaskAdmin`, the Django Tasks (LeaseBackend)
  with their cancel action, and :mod:`.queued_columns`, its columns;
* :mod:`.queued_retry`: their retry, an action and a failed task's button;
* :mod:`.views`: the operator views (run, cancel, release, status) and the
  release confirmation page;
* :mod:`.formats`: how the pages write times (Django's format, as the site
  sets it) and ids (wrapping only between their parts).

Importing this module registers the admin with ``admin.site``.
"""

from __future__ import annotations

from django.contrib import admin

from django_bgtasks.admin.options import BackgroundTaskAdmin
from django_bgtasks.admin.queued import QueuedTaskAdmin
from django_bgtasks.models import BackgroundTask, QueuedTask

__all__ = ["BackgroundTaskAdmin", "QueuedTaskAdmin"]

admin.site.register(BackgroundTask, BackgroundTaskAdmin)
admin.site.register(QueuedTask, QueuedTaskAdmin)
