"""Who may see and operate background tasks (django_bgtasks/operations/permissions.py),
the one rule every surface asks, with real users and their permissions in
the "default" database: ``view`` to read, ``change`` to operate (and read),
``delete`` to delete only; an active staff member alone, whatever the
permissions. (Every surface asking it: tests/security/test_security.py.)"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import AnonymousUser
from django.test import RequestFactory

from django_bgtasks.operations.permissions import allowed, permission, user_may

ACTIONS = ("view", "change", "delete")


@pytest.mark.django_db
def test_view_change_and_delete_each_need_their_permission(make_staff: Any) -> None:
    users = [
        make_staff("viewer", "view_backgroundtask"),
        make_staff("operator", "change_backgroundtask"),
        make_staff("deleter", "delete_backgroundtask"),
        make_staff("root", superuser=True),
        make_staff("staff"),
    ]
    assert {user.username: [allowed(user, a) for a in ACTIONS] for user in users} == {
        "viewer": [True, False, False],
        "operator": [True, True, False],  # change implies view
        "deleter": [False, False, True],  # delete implies nothing
        "root": [True, True, True],
        "staff": [False, False, False],
    }
    assert permission("change") == "django_bgtasks.change_backgroundtask"
    assert users[1].has_perm(permission("change")) and not users[0].has_perm(permission("change"))


@pytest.mark.django_db
def test_only_an_active_staff_member_may_do_anything(make_staff: Any) -> None:
    codenames = [f"{action}_backgroundtask" for action in ACTIONS]
    member = make_staff("member", *codenames, staff=False)  # every permission, not staff
    gone = make_staff("gone", *codenames, superuser=True)
    gone.is_active = False
    gone.save()
    for user in (None, AnonymousUser(), member, gone):
        assert [allowed(user, action) for action in ACTIONS] == [False, False, False], user


@pytest.mark.django_db
def test_a_request_is_asked_about_its_user(make_staff: Any) -> None:
    request = RequestFactory().get("/")
    assert not user_may(request, "view")  # no user at all (no auth middleware)
    request.user = AnonymousUser()
    assert not user_may(request, "view")
    request.user = make_staff("viewer", "view_backgroundtask")
    assert [user_may(request, action) for action in ACTIONS] == [True, False, False]
