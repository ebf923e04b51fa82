"""``django_bgtasks.events.watch_url``, a public name: the event stream itself
is :mod:`django_bgtasks.http.events`."""

from django_bgtasks.http.events import watch_url

__all__ = ["watch_url"]
