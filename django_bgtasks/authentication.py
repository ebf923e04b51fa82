"""Who a JSON API request comes from, when it brings no session: the hooks.

``BGTASKS_API_AUTHENTICATION`` lists dotted paths to callables
``(request) -> user | None``. When a request to the API has no session user,
they are tried in order and the first user one returns is the request's user;
:mod:`django_bgtasks.operations.permissions` then decides what that user may do, exactly
as for a session. ``None`` means "not mine, try the next one"; a hook may also
raise ``PermissionDenied``, which ends the search with a 403.

A hook authenticates from something a browser never sends on its own (an
``Authorization: Bearer`` header, not a cookie), so a request it vouched for is
not exposed to cross-site request forgery, and the API's writes do not ask it
for a CSRF token (:func:`django_bgtasks.http.access.authenticated`).

The built-in hook is :func:`signed_token`, for tokens that
``manage.py bgtasks token USERNAME`` prints (:func:`make_token`): a
``django.core.signing.TimestampSigner`` signature over the user's primary key
and a fingerprint of the user's password hash and ``is_active`` flag. Changing
the password, deactivating the user or changing ``SECRET_KEY`` (without
``SECRET_KEY_FALLBACKS``) revokes every token made before; each token also
carries its own maximum age.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import signing
from django.core.exceptions import ObjectDoesNotExist, PermissionDenied, ValidationError
from django.http import HttpRequest
from django.utils.crypto import constant_time_compare, salted_hmac
from django.utils.module_loading import import_string

from django_bgtasks.conf import conf

Hook = Callable[[HttpRequest], Any]

SALT = "django_bgtasks.api"
SIGNED_TOKEN = "django_bgtasks.authentication.signed_token"  # noqa: S105  (a dotted path)
DEFAULT_MAX_AGE = 30 * 86400  # seconds: 30 days
MAX_MAX_AGE = 3650 * 86400  # seconds: ten years


def hooks() -> list[Hook]:
    """The callables ``BGTASKS_API_AUTHENTICATION`` names, imported (on every
    call, so that ``override_settings`` works; a module is imported once)."""
    paths: object = conf.API_AUTHENTICATION
    if isinstance(paths, str) or not isinstance(paths, list | tuple):
        raise TypeError(
            f"BGTASKS_API_AUTHENTICATION must be a list of dotted paths, not {paths!r}."
        )
    found: list[Hook] = []
    for path in paths:
        hook = import_string(path)
        if not callable(hook):
            raise TypeError(f"BGTASKS_API_AUTHENTICATION: {path!r} is not callable.")
        found.append(hook)
    return found


def authenticate(request: HttpRequest) -> bool:
    """Give a request that has no session user the user a hook vouches for.

    Returns ``True`` when a hook did (``request.user`` is then that user), and
    ``False`` when the request keeps the user it came with: its session's, or
    none. ``PermissionDenied`` from a hook ends the search (``False``).
    """
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return False
    for hook in hooks():
        try:
            found = hook(request)
        except PermissionDenied:
            return False
        if found is not None and getattr(found, "is_authenticated", False):
            request.user = found
            return True
    return False


# --- the built-in hook: signed tokens ------------------------------------------------


def _fingerprint(user: Any, secret: str | None = None) -> str:
    """What the token remembers of the user: a keyed hash of the password hash
    and ``is_active`` (so a new password or a deactivation revokes it)."""
    material = f"{user.password}|{bool(user.is_active)}"
    return salted_hmac(f"{SALT}.user", material, secret=secret, algorithm="sha256").hexdigest()


def validate_max_age(max_age: Any) -> int:
    """A token's lifetime: a whole number of seconds from 1 to ten years."""
    if isinstance(max_age, bool) or not isinstance(max_age, int):
        raise TypeError(f"max_age must be a whole number of seconds, not {max_age!r}.")
    if not 1 <= max_age <= MAX_MAX_AGE:
        raise ValueError(
            f"max_age must be from 1 to {MAX_MAX_AGE} seconds (ten years), not {max_age}."
        )
    return max_age


def make_token(user: Any, max_age: int = DEFAULT_MAX_AGE) -> str:
    """A bearer token for ``user``, valid for ``max_age`` seconds (unless revoked)."""
    max_age = validate_max_age(max_age)
    payload = {"user": str(user.pk), "fp": _fingerprint(user), "max_age": max_age}
    return signing.TimestampSigner(salt=SALT).sign_object(payload)


def user_for_token(token: str) -> Any:
    """The active user ``token`` was made for, or ``None``: for a bad signature
    (garbage, another salt, another key), an expired token, an unknown or
    inactive user, or a password changed since. Never raises on bad input."""
    signer = signing.TimestampSigner(salt=SALT)
    try:
        payload = signer.unsign_object(token)
        if not isinstance(payload, dict):
            return None
        max_age = validate_max_age(payload.get("max_age"))
        signer.unsign(token, max_age=max_age)  # the same signature, and not expired
        user = get_user_model()._default_manager.get(pk=payload["user"])
    except (
        signing.BadSignature,
        ObjectDoesNotExist,
        ValidationError,
        ValueError,
        TypeError,
        KeyError,
        OverflowError,
    ):
        return None
    if not user.is_active:
        return None
    # The fingerprint was made with the key of the day; a key rotated into
    # SECRET_KEY_FALLBACKS still signs, so it may still have made it.
    secrets = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    fingerprint = str(payload.get("fp", ""))
    if any(constant_time_compare(fingerprint, _fingerprint(user, key)) for key in secrets):
        return user
    return None


def bearer_token(request: HttpRequest) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or ``None``."""
    scheme, _, token = request.headers.get("Authorization", "").strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def signed_token(request: HttpRequest) -> Any:
    """The built-in hook: the user of a valid ``Authorization: Bearer`` token
    made by ``manage.py bgtasks token``, else ``None``."""
    token = bearer_token(request)
    return None if token is None else user_for_token(token)
