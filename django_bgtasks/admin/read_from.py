"""The admin's lists and dashboard, read from ``BGTASKS_READ_DATABASE``
(:mod:`django_bgtasks.db.read_database`), and the page says so: where a
replica is named, a message with how far behind it may be, or, where it
could not be read, a warning that the page was read from the primary, and
why. A task's own page and the actions read and write the primary."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from django.contrib import messages
from django.http import HttpRequest

from django_bgtasks.db import read_database
from django_bgtasks.db.read_database import ReadSource


@contextlib.contextmanager
def listing(request: HttpRequest) -> Iterator[ReadSource]:
    """The block's reads from the read database; the page's messages say
    what it read (render the page inside the block: its lazy reads too)."""
    with read_database.reading() as source:
        text = source.describe()
        if text:
            level = messages.WARNING if source.fallback is not None else messages.INFO
            messages.add_message(request, level, text, fail_silently=True)
        yield source
