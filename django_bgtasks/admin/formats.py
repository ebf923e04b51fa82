"""How the admin writes times and ids, so that they fit their cells whole.

**Times** are Django's own format, as the site sets it: every time on the
admin's pages is written as Django's admin writes its own
(``DATETIME_FORMAT`` of the active language, or of ``FORMAT_MODULE_PATH``,
in the current time zone), but to the second (:func:`datetime_format`), in
a ``<time>`` whose ``datetime`` is the ISO instant. live.js writes the
times of runs that start after the page was made with
``static/django_bgtasks/dates.js``, a port of ``django.utils.dateformat``,
from what :func:`date_settings` hands it: the format, the time zone, and
the month and day names as Django translates them.

**Ids** (owner ids ``host:pid:random``, worker ids, hosts, task paths) have
no space to wrap at, and a 60-character host is wider than a column: they
may break after each of their separators (``. : _ /``; after a ``-`` the
browser breaks by itself), never inside a part (:func:`id_html`; live.js's
``setId()`` writes them the same way). A UUID never breaks (admin.css).
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from django.utils import dateformat, timezone
from django.utils.dates import MONTHS, MONTHS_3, MONTHS_ALT, MONTHS_AP, WEEKDAYS, WEEKDAYS_ABBR
from django.utils.formats import get_format
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext


def admin_time(value: dt.datetime) -> str:
    """``value`` as the admin writes a time: ``DATETIME_FORMAT`` to the second
    (:func:`datetime_format`), in the current time zone."""
    return dateformat.format(timezone.localtime(value), datetime_format())


# A time of day to the minute, in Django's format characters, outside a
# backslash's escape: "P" (2:30 p.m., noon), "f" (2:30, 2), or hours and
# minutes (H:i, G:i, h:i, g:i) not followed by seconds.
_TO_THE_MINUTE = re.compile(r"(?<!\\)(?:P|f|([GgHh]):i(?!:s))")


def datetime_format() -> str:
    """The active language's ``DATETIME_FORMAT``, with seconds where it has
    minutes only: English's ``N j, Y, P`` ("Dec. 6, 2026, 2:30 p.m.") reads
    ``N j, Y, g:i:s a`` ("Dec. 6, 2026, 2:30:05 p.m."). A task's times are
    seconds apart (a retry's delay, a run's start after its enqueue); to the
    minute, the list showed two attempts at the same time. A format with
    seconds is kept as it is."""
    wanted = get_format("DATETIME_FORMAT")

    def to_the_second(found: re.Match[str]) -> str:
        if found[0] == "P":
            return "g:i:s a"
        if found[0] == "f":
            return "g:i:s"
        return f"{found[1]}:i:s"

    return _TO_THE_MINUTE.sub(to_the_second, wanted)


def time_html(value: dt.datetime | None) -> SafeString | str:
    """A ``<time>`` holding :func:`admin_time`; ``""`` for ``None``."""
    if value is None:
        return ""
    return format_html('<time datetime="{}">{}</time>', value.isoformat(), admin_time(value))


# An id's parts: each runs to a separator, which it keeps.
_ID_PART = re.compile(r"[^.:_/]*[.:_/]?")


def id_html(text: str) -> SafeString:
    """``text`` (an id), escaped, with a break opportunity (``<wbr>``) after
    each separator: it wraps between its parts, never inside one."""
    parts = [part for part in _ID_PART.findall(text) if part]
    return format_html(
        '<span class="bgtasks-id">{}</span>',
        format_html_join(SafeString("<wbr>"), "{}", ((part,) for part in parts)),
    )


def _zone_names(zone: dt.tzinfo, year: int) -> list[tuple[int, str, bool]]:
    """The zone's states this year, (UTC offset in seconds, name, is DST), for
    the format characters ``e``, ``T`` and ``I``, which the browser can't
    name as Python does."""
    states = []
    for month in (1, 7):
        moment = dt.datetime(year, month, 1, 12, tzinfo=zone)
        offset = moment.utcoffset() or dt.timedelta(0)
        states.append((int(offset.total_seconds()), moment.tzname() or "", bool(moment.dst())))
    return states


def date_settings() -> dict[str, Any]:
    """What dates.js needs to write a time as :func:`admin_time` does."""
    now = timezone.localtime()
    return {
        "format": datetime_format(),
        "zone": timezone.get_current_timezone_name(),
        "zones": _zone_names(now.tzinfo or dt.UTC, now.year),
        "months": [str(MONTHS[month]) for month in range(1, 13)],
        "months3": [str(MONTHS_3[month]) for month in range(1, 13)],
        "monthsAlt": [str(MONTHS_ALT[month]) for month in range(1, 13)],
        "monthsAP": [str(MONTHS_AP[month]) for month in range(1, 13)],
        "weekdays": [str(WEEKDAYS[day]) for day in range(7)],
        "weekdaysAbbr": [str(WEEKDAYS_ABBR[day]) for day in range(7)],
        "words": {
            word: gettext(word) for word in ("a.m.", "p.m.", "AM", "PM", "midnight", "noon")
        },
    }
