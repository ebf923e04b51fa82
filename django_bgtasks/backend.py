"""The path ``TASKS`` names, ``django_bgtasks.backend.LeaseBackend``, and
``task_lease``: public names. The backend itself is
:mod:`django_bgtasks.queue.backend`."""

from django_bgtasks.queue.backend import LeaseBackend, LeaseTask
from django_bgtasks.queue.execute import task_lease

__all__ = ["LeaseBackend", "LeaseTask", "task_lease"]
