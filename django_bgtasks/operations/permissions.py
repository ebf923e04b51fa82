"""Who may see and operate background tasks: the one rule, for every surface.

An active staff member with the ``BackgroundTask`` model's permission, as the
admin requires: ``"view"`` to read, ``"change"`` to run, cancel or release,
``"delete"`` to delete Django Tasks (operations/bulk.py). The change
permission implies view, as it does in the admin; delete implies nothing.
"""

from __future__ import annotations

from typing import Any, Literal

from django.contrib.auth import get_permission_codename
from django.http import HttpRequest

from django_bgtasks.models import BackgroundTask

Action = Literal["view", "change", "delete"]


def permission(action: Action) -> str:
    """The model's permission for ``action``, as ``user.has_perm`` takes it."""
    opts = BackgroundTask._meta
    return f"{opts.app_label}.{get_permission_codename(action, opts)}"


def user_may(request: HttpRequest, action: Action) -> bool:
    """Whether the request's user may ``"view"``, ``"change"`` or ``"delete"`` tasks."""
    return allowed(getattr(request, "user", None), action)


def allowed(user: Any, action: Action) -> bool:
    """Whether ``user`` (from a session, an API token, or ``None``) may
    ``"view"``, ``"change"`` or ``"delete"`` tasks."""
    if user is None or not user.is_active or not getattr(user, "is_staff", False):
        return False
    if action == "delete":
        return bool(user.has_perm(permission("delete")))
    if action == "view" and user.has_perm(permission("view")):
        return True
    return bool(user.has_perm(permission("change")))
