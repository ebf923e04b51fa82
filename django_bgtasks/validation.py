"""What the lease operations accept. Every check here runs before any SQL, so a
bad argument raises ``ValueError``/``TypeError`` and writes nothing.

The limits are the table's (200-character names and owners; limits.py holds
every size) and what both databases can store: PostgreSQL's ``jsonb`` refuses
NUL characters and lone surrogates, and an interval overflows long before
``float`` does, so those are refused here with a clear message instead of
surfacing as a database error.

Values are encoded with Django's own JSON encoder (``DjangoJSONEncoder``), so
datetimes, dates, times, timedeltas, ``Decimal``, ``UUID`` and lazy translation
strings are stored as the strings Django writes for them everywhere else.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeGuard

from django.core.serializers.json import DjangoJSONEncoder

from django_bgtasks.choices import HOLDER_OUTCOMES
from django_bgtasks.conf import conf
from django_bgtasks.limits import (
    MAX_ATTEMPTS,
    MAX_ERROR_LENGTH,
    MAX_NAME_LENGTH,
    MAX_OWNER_LENGTH,
    MAX_QUEUE_NAME_LENGTH,
    MAX_RESULT_NOTE_LENGTH,
    MAX_RETRY_DELAY,
    MAX_TIMEOUT,
    MAX_TTL,
    MAX_VALUE_DEPTH,
    MIN_TTL,
)


def is_finite_number(value: object) -> TypeGuard[int | float]:
    """An int or float (not a bool) that is finite, also for an int too large
    for any float, which JSON and Python settings both allow."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


# Unicode's Cc (control characters: NUL, newlines, escapes; they would corrupt
# logs, terminals and PostgreSQL text) and Cs (lone surrogates, which UTF-8
# can't encode), as ranges: one regex search, not a lookup per character, as
# names and owners are checked on every lease operation.
_UNWRITABLE = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def check_text(kind: str, text: object, max_length: int) -> str:
    """``text``, a ``kind`` of name: a str of 1 to ``max_length`` printable
    characters, without spaces around it (a ``TypeError`` or ``ValueError``
    naming ``kind`` else)."""
    if not isinstance(text, str):
        raise TypeError(f"{kind} must be a str, not {type(text).__name__}")
    if not text.strip():
        raise ValueError(f"{kind} must not be blank")
    if len(text) > max_length:
        raise ValueError(f"{kind} must be at most {max_length} characters, not {len(text)}")
    if text != text.strip():
        raise ValueError(f"{kind} must not start or end with whitespace: {text!r}")
    if _UNWRITABLE.search(text):
        raise ValueError(f"{kind} must not contain control characters: {text!r}")
    return text


def validate_name(name: object) -> str:
    """A task name: 1-200 printable characters, and no ``/`` so that every name
    is one URL path segment in the JSON API. For the same reason ``.`` and
    ``..`` are refused: browsers and HTTP clients remove those segments from a
    URL (even percent-encoded), so no URL could name such a task."""
    name = check_text("task name", name, MAX_NAME_LENGTH)
    if "/" in name:
        raise ValueError(f"task name must not contain '/': {name!r}")
    if name in (".", ".."):
        raise ValueError(f"task name must not be {name!r}: it can't be a URL path segment")
    return name


def validate_queue_name(queue: object) -> str:
    """A Django Tasks queue name, as the queue's table holds it: 1-100
    printable characters."""
    return check_text("queue name", queue, MAX_QUEUE_NAME_LENGTH)


def validate_queue_names(queues: object) -> list[str]:
    """A claim's queues: a list of queue names, or ``None`` for every queue ([])."""
    if queues is not None and not isinstance(queues, list):
        raise TypeError(f"queues must be a list of queue names or None, not {queues!r}")
    return [validate_queue_name(name) for name in queues or []]


def validate_owner(owner: object) -> str:
    """A holder identity: 1-200 printable characters."""
    return check_text("owner", owner, MAX_OWNER_LENGTH)


def validate_ttl(ttl: object) -> float:
    """A lease duration in seconds, ``None`` meaning ``BGTASKS_TTL``."""
    if ttl is None:
        ttl = conf.TTL
    seconds = _check_seconds("ttl", ttl, zero=False)
    if seconds < MIN_TTL:
        raise ValueError(
            f"ttl must be at least {MIN_TTL:g} seconds, not {seconds:g}: a heartbeat and a "
            "database round trip must fit in it"
        )
    return seconds


def validate_wait(wait: object) -> float | None:
    """How long a claim may wait for a held lease, in seconds; ``None`` or 0: not at all."""
    if wait is None:
        return None
    return _check_seconds("wait", wait, zero=True)


def _check_seconds(kind: str, value: object, *, zero: bool) -> float:
    """``value`` as a float of seconds: an int or float (not a bool), finite,
    not negative (and with ``zero`` false, above 0), at most ``MAX_TTL``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{kind} must be a number of seconds, not {type(value).__name__}")
    try:
        seconds = float(value)
    except OverflowError:  # an int beyond any float
        raise ValueError(f"{kind} must be at most {MAX_TTL:g} seconds") from None
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not zero):
        least = "non-negative" if zero else "positive"
        raise ValueError(f"{kind} must be a {least}, finite number of seconds, not {seconds!r}")
    if seconds > MAX_TTL:
        raise ValueError(f"{kind} must be at most {MAX_TTL:g} seconds, not {seconds:g}")
    return seconds


def validate_import_deadline(deadline: object) -> float:
    """``LeaseBackend``'s ``OPTIONS["IMPORT_DEADLINE"]``: seconds above 0, at
    most ``limits.MAX_TIMEOUT`` (a week)."""
    return _check_bounded("IMPORT_DEADLINE", deadline, MAX_TIMEOUT)


def validate_timeout(timeout: object) -> float | None:
    """A task's ``timeout=``: seconds above 0, at most ``limits.MAX_TIMEOUT``
    (a week); ``None`` means none."""
    if timeout is None:
        return None
    return _check_bounded("timeout", timeout, MAX_TIMEOUT)


def validate_retry_delay(delay: object, kind: str = "retry_delay") -> float | None:
    """A Django Task's ``retry_delay=`` (or its backend's ``RETRY_DELAY``):
    seconds above 0, at most ``limits.MAX_RETRY_DELAY`` (an hour, the cap of
    its doubling); ``None`` means a retry at once."""
    if delay is None:
        return None
    return _check_bounded(kind, delay, MAX_RETRY_DELAY)


def _check_bounded(kind: str, value: object, most: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{kind} must be a number of seconds, not {type(value).__name__}")
    if not is_finite_number(value) or not 0 < value <= most:
        raise ValueError(f"{kind} must be above 0 and at most {most:g} seconds, not {value!r}")
    return float(value)


def validate_attempts(attempts: object, kind: str = "max_attempts") -> int:
    """How many runs a task may be given: a whole number from 1 to ``limits.MAX_ATTEMPTS``."""
    if isinstance(attempts, bool) or not isinstance(attempts, int):
        raise TypeError(f"{kind} must be an int, not {type(attempts).__name__}")
    if not 1 <= attempts <= MAX_ATTEMPTS:
        raise ValueError(f"{kind} must be between 1 and {MAX_ATTEMPTS}, not {attempts}")
    return attempts


def validate_token(token: object) -> int | None:
    """A fencing token as ``try_claim`` returned it, or ``None``."""
    if token is None:
        return None
    return _check_whole("token", token, bits=63)


def validate_limit(limit: object) -> int:
    """How many queued tasks one claim may take: a whole number, 1 or more
    (below 2**31: the statements take it as an integer)."""
    return _check_whole("limit", limit, bits=31)


def _check_whole(kind: str, value: object, *, bits: int) -> int:
    """``value``, an int from 1 to ``2**bits - 1`` (what a column of that size holds)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{kind} must be an int, not {type(value).__name__}")
    if not 1 <= value < 2**bits:
        raise ValueError(f"{kind} must be between 1 and 2**{bits} - 1, not {value}")
    return value


def heartbeat_interval(ttl: float) -> float:
    """Seconds between heartbeats for a lease of ``ttl``: ``BGTASKS_HEARTBEAT_INTERVAL``
    or a third of the ttl. It must stay below half the ttl, so that a renewal
    that fails once is retried before the lease expires."""
    interval = conf.HEARTBEAT_INTERVAL
    if interval is None:
        return ttl / 3
    if isinstance(interval, bool) or not isinstance(interval, int | float):
        raise TypeError("BGTASKS_HEARTBEAT_INTERVAL must be a number of seconds or None")
    if not is_finite_number(interval) or interval <= 0 or interval >= ttl / 2:
        raise ValueError(
            f"BGTASKS_HEARTBEAT_INTERVAL ({interval!r} s) must be positive and below "
            f"half the ttl ({ttl:g} s), so a failed heartbeat is retried in time"
        )
    return float(interval)


def progress_interval() -> float:
    """``BGTASKS_PROGRESS_INTERVAL``, checked: a finite number of seconds, 0 or more."""
    interval = conf.PROGRESS_INTERVAL
    if isinstance(interval, bool) or not isinstance(interval, int | float):
        raise TypeError("BGTASKS_PROGRESS_INTERVAL must be a number of seconds")
    if not is_finite_number(interval) or interval < 0:
        raise ValueError(
            f"BGTASKS_PROGRESS_INTERVAL ({interval!r} s) must be 0 (write every update) or more"
        )
    return float(interval)


def max_value_bytes() -> int:
    """``BGTASKS_MAX_VALUE_BYTES``, checked: a whole number of bytes above 0
    (not a bool, nor a string such as ``"1MB"``, which would fail every
    comparison with a size)."""
    limit = conf.MAX_VALUE_BYTES
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise TypeError(
            f"BGTASKS_MAX_VALUE_BYTES must be a whole number of bytes above 0, not {limit!r}"
        )
    return limit


class _RefusedText(ValueError):
    """A string the databases would refuse (NUL, a lone surrogate)."""


class ValueEncoder(DjangoJSONEncoder):
    """``DjangoJSONEncoder``, whose strings (a lazy translation string, once
    it is text) are checked like every other string of a value."""

    def default(self, o: Any) -> Any:
        """What Django's encoder makes of ``o``, refused if it is a string the
        databases would refuse; ``TypeError`` for what it can't encode."""
        encoded = super().default(o)
        if isinstance(encoded, str):
            _check_json_text(encoded)
        return encoded


# One encoder for every call: it keeps only its options, so threads share it.
_ENCODER = ValueEncoder(allow_nan=False, ensure_ascii=False, separators=(",", ":"))


def encode_value(value: Any, *, kind: str = "value", max_bytes: int | None = None) -> str | None:
    """Encode a task's value as JSON text; ``None`` is stored as SQL NULL.

    Encoded as Django encodes JSON (``DjangoJSONEncoder``). Raises
    ``TypeError`` for what it can't encode and ``ValueError`` for what it can
    but the databases would refuse or should not hold. ``kind`` names the
    value in the messages. ``max_bytes`` is ``BGTASKS_MAX_VALUE_BYTES`` unless
    given (a running lease reads the setting once, not per ``update()``).
    """
    if value is None:
        return None
    # Encode first (C, fast: update() calls this on every call), then walk the
    # value only when the text hints at a string or depth the walk refuses; so
    # the walk's precise reasons are still what a refused value raises.
    try:
        text = _ENCODER.encode(value)
        # ASCII text is its own size; other text is encoded to count its
        # bytes, and a lone surrogate fails here.
        size = len(text) if text.isascii() else len(text.encode())
    except (TypeError, ValueError, RecursionError) as exc:
        _check_json_strings(value, kind)
        if isinstance(exc, _RefusedText):
            raise ValueError(f"{kind} {exc}") from None
        if isinstance(exc, TypeError):
            raise TypeError(f"{kind} is not JSON-serialisable: {exc}") from None
        # NaN or infinity; an aware time; a circular value
        raise ValueError(f"{kind} is not valid JSON: {exc}") from None
    # A NUL is written \u0000; brackets bound the depth from above.
    if "\\u0000" in text or text.count("[") + text.count("{") > MAX_VALUE_DEPTH:
        _check_json_strings(value, kind)
    limit = max_value_bytes() if max_bytes is None else max_bytes
    if size > limit:
        raise ValueError(
            f"{kind} is {size} bytes of JSON; the limit is {limit} (BGTASKS_MAX_VALUE_BYTES)"
        )
    return text


def encode_result(result: Any) -> tuple[str | None, str]:
    """A run's return value as its ``TaskRun`` keeps it: the JSON text (as
    :func:`encode_value` writes it) and ``""``, or ``None`` and a note that
    says why it was not stored (it does not encode, or is too large).

    Never raises: what a function returns must not keep its run from ending.
    """
    try:
        return encode_value(result, kind="result"), ""
    except Exception as exc:  # also whatever a lazy string's str() raises
        note = f"not stored: {type(exc).__name__}: {exc}"
        return None, clean_error(note)[:MAX_RESULT_NOTE_LENGTH]


def _check_json_strings(value: Any, kind: str = "value") -> None:
    # Walk iteratively: a self-referencing or absurdly deep value must end in a
    # ValueError here, not a RecursionError inside json. (Lazy strings become
    # text only in the encoder, whose default() checks them.)
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            try:
                _check_json_text(item)
            except _RefusedText as exc:
                raise ValueError(f"{kind} {exc}") from None
        elif isinstance(item, dict | list | tuple):
            if depth > MAX_VALUE_DEPTH:
                raise ValueError(f"{kind} is nested deeper than {MAX_VALUE_DEPTH} levels")
            if isinstance(item, dict):
                stack.extend((key, depth) for key in item if isinstance(key, str))
                stack.extend((child, depth + 1) for child in item.values())
            else:
                stack.extend((child, depth + 1) for child in item)


def _check_json_text(text: str) -> None:
    if "\x00" in text:
        raise _RefusedText("must not contain NUL characters (PostgreSQL refuses them)")
    try:
        text.encode()
    except UnicodeEncodeError:
        raise _RefusedText("must not contain lone surrogates (not valid UTF-8)") from None


def clean_error(error: object) -> str:
    """The error text stored with a run: any object's text, made storable and
    bounded, because it comes from an arbitrary exception."""
    text = str(error).replace("\x00", "\ufffd")
    text = text.encode("utf-8", "replace").decode()
    return text[:MAX_ERROR_LENGTH]


def validate_outcome(outcome: object) -> str:
    """How a holder ended its run: succeeded, failed or cancelled."""
    if outcome not in HOLDER_OUTCOMES:
        allowed = sorted(str(value) for value in HOLDER_OUTCOMES)
        raise ValueError(f"outcome must be one of {allowed}, not {outcome!r}")
    return str(outcome)


def _kind(value: object) -> str:
    """What ``value`` is, in words that also fit a value decoded from JSON."""
    if value is None:
        return "null (None)"
    json_kinds = {bool: "a boolean", str: "a string", int: "a number", float: "a number"}
    json_kinds |= {list: "an array (a list)", dict: "an object (a dict)"}
    return json_kinds.get(type(value), type(value).__name__)


def validate_args(args: object) -> list[Any]:
    """A run's positional arguments: a list or tuple (a JSON array), as a
    list; ``None`` means none."""
    if args is None:
        return []
    if not isinstance(args, list | tuple):
        raise TypeError(f"args must be a list or tuple (a JSON array), not {_kind(args)}")
    return list(args)


def validate_kwargs(kwargs: object) -> dict[str, Any]:
    """A run's keyword arguments: a dict (a JSON object) whose keys are
    strings; ``None`` means none."""
    if kwargs is None:
        return {}
    if not isinstance(kwargs, dict):
        raise TypeError(f"kwargs must be a dict (a JSON object), not {_kind(kwargs)}")
    for key in kwargs:
        if not isinstance(key, str):
            raise TypeError(f"kwargs' keys must be strings, not {_kind(key)}")
    return dict(kwargs)


def parse_json(text: str | bytes, what: str) -> Any:
    """``text`` as JSON (bytes: in UTF-8, -16 or -32, as JSON allows); a
    ``ValueError`` that names ``what`` for text that is not JSON, or nested
    too deep for Python's parser."""
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{what} is not valid JSON: {exc}") from None
    except RecursionError:
        raise ValueError(f"{what} is nested too deeply") from None


# The one JSON form of a run's arguments, as a request stores them too.
ARGUMENTS_EXAMPLE = '{"args": [1, 2], "kwargs": {"days": 7}}'


def arguments_from_json(text: str) -> tuple[list[Any], dict[str, Any]]:
    """``(args, kwargs)`` from one JSON object of the form
    ``{"args": [...], "kwargs": {...}}`` (each key optional; blank text: no
    arguments), for a surface that takes them in one field. A ``ValueError``
    for text that is no such object, a ``TypeError`` for an ``args`` or
    ``kwargs`` of the wrong type."""
    if not text.strip():
        return [], {}
    data = parse_json(text, "the arguments field")
    if not isinstance(data, dict):
        raise ValueError(
            f"the arguments must be a JSON object such as {ARGUMENTS_EXAMPLE}, not {_kind(data)}"
        )
    unknown = sorted(set(data) - {"args", "kwargs"})
    if unknown:
        keys = ", ".join(map(repr, unknown))
        raise ValueError(f"the arguments may have only the keys 'args' and 'kwargs', not {keys}")
    return validate_args(data.get("args")), validate_kwargs(data.get("kwargs"))


def check_arguments(
    func: Callable[..., Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    passed_first: bool,
    task: str,
) -> None:
    """A ``TypeError`` when ``func`` could not be called with ``args`` and
    ``kwargs`` (a missing or unexpected argument), as Python would raise it at
    the call, so that work filed for later is refused now, with its reason,
    rather than failing every attempt of its run. ``passed_first``: the
    caller passes one more argument before these (a background task's lease,
    a Django Task's context). A callable whose signature Python can't read is
    not checked."""
    signature = _signature(func)
    if signature is None:
        return
    leading = (None,) if passed_first else ()
    try:
        signature.bind(*leading, *args, **kwargs)
    except TypeError as exc:
        raise TypeError(f"task {task} can't take these arguments: {exc}") from None


@functools.lru_cache(maxsize=1024)
def _signature(func: Callable[..., Any]) -> inspect.Signature | None:
    """``func``'s signature, read once per function: reading it costs more
    than binding the arguments of an enqueue to it. ``None`` for a callable
    whose signature Python can't read (some builtins and C callables)."""
    try:
        return inspect.signature(func)
    except (TypeError, ValueError):
        return None


def validate_pairs(items: object) -> list[tuple[Sequence[Any], dict[str, Any]]]:
    """The tasks of one ``enqueue_many()``: an iterable of ``(args, kwargs)``
    pairs (``args`` a list or tuple, ``kwargs`` a dict with string keys), as
    a list; a ``TypeError`` naming the first item that is not one (counted
    from 0)."""
    if isinstance(items, str | bytes | dict) or not hasattr(items, "__iter__"):
        raise TypeError(f"the items must be a list of (args, kwargs) pairs, not {_kind(items)}")
    pairs: list[tuple[Sequence[Any], dict[str, Any]]] = []
    for index, item in enumerate(items):
        if not isinstance(item, list | tuple) or len(item) != 2:
            raise TypeError(f"item {index} must be an (args, kwargs) pair, not {_kind(item)}")
        args, kwargs = item
        # The usual pair at once (a batch may hold 10,000); any other through
        # the validators, for their conversions and their messages.
        if type(args) is not tuple or type(kwargs) is not dict or not _str_keys(kwargs):
            try:
                args, kwargs = validate_args(args), validate_kwargs(kwargs)
            except TypeError as exc:
                raise TypeError(f"item {index}: {exc}") from None
        pairs.append((args, kwargs))
    return pairs


def _str_keys(mapping: dict[Any, Any]) -> bool:
    return all(type(key) is str for key in mapping)
