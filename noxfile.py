"""The test matrix, the combined coverage report and the installed-wheel check.

Two legs. Both test SQLite, the embedded PostgreSQL 18 the suite starts and
the machine's MariaDB; the first also the server in ``DATABASE_URL``
(PostgreSQL 15 in CI), the same embedded server through the PgBouncers the
suite starts, the torture profile, the PostgreSQL failover and the network
partition (tests/faults/test_failover.py, test_partition.py):

=====================  ===========  ==================  =====================================
leg                    Python       Django              what runs
=====================  ===========  ==================  =====================================
``tests-3.11``         3.11         5.2 LTS             the whole suite, on every server
``tests-3.13``         3.13         newest 6.x          what Django's version changes, on three
=====================  ===========  ==================  =====================================

What only the first leg runs tests servers and faults, which no Django
version changes (``VERSION_INDEPENDENT`` below says which and why), and is
the slowest part; the second leg leaves it out on purpose
(``DATABASE_URL=""``, ``BGTASKS_PGBOUNCER=0``), which under ``CI`` the suite
accepts only when said so explicitly.

.ci/run runs the 3.11 leg as the README's ``make test`` (the project's
``.venv`` is Python 3.11 with Django 5.2 there, which .ci/run checks), so the
command newcomers are told to run is the one CI runs; ``nox -s tests-3.11``
runs the same leg in a throwaway virtualenv. Every leg measures branch
coverage, in the test process and in the worker processes it starts;
``nox -s coverage`` combines the legs and fails under the bar in pyproject.toml.

``nox -s wheel`` builds the sdist and the wheel, checks them, installs the
wheel (not the checkout) into a fresh virtualenv on each leg's Python and
Django, and runs the example project from it: ``check``, ``makemigrations
--check``, ``migrate``, then tests/wheel/smoke.py (the extras' packages, a
lease cycle, the shipped templates and static files, the admin and the JSON
API, with a session and with a bearer token, where shipped).

Usage: ``nox`` runs everything; ``nox -s tests-3.13 -- -k leases`` passes
arguments to pytest. Set ``DATABASE_URL`` to include a PostgreSQL server;
the machine's MariaDB is included when it answers (``BGTASKS_MYSQL_URL``
names another, tests/settings.py).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
PACKAGE = "django_bgtasks"

nox.options.default_venv_backend = "venv"
# A missing Python fails the run; it is never skipped as if it had passed.
nox.options.error_on_missing_interpreters = True
nox.options.download_python = "never"
nox.options.sessions = ["tests", "coverage", "wheel"]


@dataclass(frozen=True)
class Leg:
    python: str
    django: str  # a pip requirement
    # The torture profile, the machine's PostgreSQL (DATABASE_URL) and the
    # suite's PgBouncer test servers and topologies, which no Django version
    # changes: one leg runs them. Both run SQLite, the embedded PostgreSQL and
    # MariaDB (Django 6 checks the models against each database).
    servers: bool


MATRIX = [
    Leg("3.11", "Django>=5.2,<5.3", servers=True),
    Leg("3.13", "Django>=6,<7", servers=False),
]
LEGS = {leg.python: leg for leg in MATRIX}


def _let_pyenv_find_the_matrix() -> None:
    """With pyenv, ``python3.13`` is a shim that fails unless 3.13 is among
    the selected versions; select the newest install of each leg's Python."""
    if os.environ.get("PYENV_VERSION") or not shutil.which("pyenv"):
        return
    bare = subprocess.run(["pyenv", "versions", "--bare"], capture_output=True, text=True)
    installed = [line.strip() for line in bare.stdout.splitlines() if line.strip()[:1].isdigit()]
    selected = []
    for leg in MATRIX:
        matches = [v for v in installed if v.startswith(leg.python + ".") and v.count(".") == 2]
        if matches:
            selected.append(max(matches, key=lambda v: tuple(map(int, v.split(".")))))
    if selected:
        os.environ["PYENV_VERSION"] = ":".join(selected)


_let_pyenv_find_the_matrix()


def coverage_env() -> dict[str, str]:
    """Measure coverage in every Python process the tests start (see the
    [tool.coverage.run] comment in pyproject.toml)."""
    return {"COVERAGE_PROCESS_START": str(ROOT / "pyproject.toml")}


# What the second leg leaves out: what no Django version changes. The servers
# (DATABASE_URL's PostgreSQL 15, the PgBouncers) and the faults of leases and
# workers as real processes (SIGKILL, SIGSTOP, restarts, races, partitions,
# failover, torture) test the lease statements and the database, which the
# first leg runs on every engine, and the Hypothesis fuzzing of the same
# statements. What Django's version does change stays in: the Django Tasks
# framework (django.tasks against the backport, its worker processes
# included: tests/faults/test_backend_workers.py), the admin and its
# templates, the views, the command's parser, the system checks and Django
# 6's own checks of the models on each database, the migrations, the ASGI
# event streams, the browser, the example project and the database backends
# under the lease statements (psycopg's cursors, prepared statements).
VERSION_INDEPENDENT = [
    "tests/faults/torture",
    "tests/faults/test_failover.py",
    "tests/faults/test_partition.py",
    "tests/faults/test_processes.py",
    "tests/faults/test_races.py",
    "tests/faults/test_workers.py",
    "tests/fuzz",
    "tests/db/test_pgbouncer.py",
    # The queue's features as real worker processes (flow limits, pause,
    # retries and timeouts, schedules): what they test is the claim's SQL and
    # the worker's threads; test_backend_workers.py's remaining tests run the
    # same workers through Django 6's Tasks framework.
    "tests/faults/test_flow_workers.py",
    "tests/faults/test_pause.py",
    "tests/faults/test_retries_and_timeouts.py",
    "tests/faults/test_task_schedules.py",
    # Of the Django Tasks workers' fault tests, the ones that prove exactly
    # once under races and faults with hundreds of tasks: the claim's and the
    # end's SQL, as test_races.py and test_workers.py do for the leases. The
    # rest of the file (retry after SIGKILL, SIGTERM, cancel, priority order,
    # a rolled-back enqueue, a database fault) runs here too.
    "tests/faults/test_backend_workers.py::test_800_tasks_from_4_processes_run_exactly_once_by_3_workers",
    "tests/faults/test_backend_workers.py::test_batches_through_a_workers_fault_run_each_attempt_once",
    "tests/faults/test_backend_workers.py::test_a_unique_task_enqueued_50_times_at_once_by_5_processes_runs_once",
    "tests/faults/test_backend_workers.py::test_a_batch_enqueued_in_one_statement_runs_exactly_once_on_3_workers",
]
# pytest-xdist, as the Makefile's XDIST: JOBS processes, handed the tests one
# or two at a time so that the long ones, ordered first, spread over them.
XDIST = ["-n", os.environ.get("JOBS", "4"), "--maxschedchunk", "1"]


@nox.session(python=[leg.python for leg in MATRIX])
def tests(session: nox.Session) -> None:
    """One leg of the matrix: the suite on its databases, under coverage, in
    the Makefile's two stages (in parallel, then the ``serial`` tests alone)."""
    leg = LEGS[str(session.python)]
    session.install("-e", ".[dev,mysql]", leg.django)
    session.run(
        "python", "-c", "import django, sys; print(sys.version, 'Django', django.__version__)"
    )
    args = list(session.posargs)
    env = coverage_env()
    if not leg.servers:
        # A file or folder is left out whole; a test (path::name) deselected.
        args += [
            f"--deselect={path}" if "::" in path else f"--ignore={path}"
            for path in VERSION_INDEPENDENT
        ]
        env |= {"DATABASE_URL": "", "BGTASKS_PGBOUNCER": "0"}
    # Exit status 5: no test of that stage was selected.
    session.run(
        "python", "-m", "pytest", *XDIST, "-m", "not serial", *args,
        env=env, success_codes=[0, 5],
    )  # fmt: skip
    session.run("python", "-m", "pytest", "-m", "serial", *args, env=env, success_codes=[0, 5])


@nox.session
def coverage(session: nox.Session) -> None:
    """Combine the coverage of every leg (and every worker process) and report.

    Fails under the ``fail_under`` bar in pyproject.toml."""
    session.install("coverage>=7.10")
    if not list(ROOT.glob(".coverage.*")):
        session.error("no coverage data: run the test legs first")
    session.run("coverage", "combine", "--quiet")
    session.run("coverage", "report")


@nox.session(python=[leg.python for leg in MATRIX])
def wheel(session: nox.Session) -> None:
    """Build, check and install the wheel; run the example project from it."""
    # Outside the checkout, so nothing can import django_bgtasks from it.
    tmp = Path(tempfile.mkdtemp(prefix="bgtasks-wheel-"))
    try:
        _build_check_install(session, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _build_check_install(session: nox.Session, tmp: Path) -> None:
    dist = tmp / "dist"
    session.install("build", "twine")
    session.run("python", "-m", "build", "--outdir", str(dist), str(ROOT))
    session.run("twine", "check", "--strict", *map(str, sorted(dist.iterdir())))

    [wheel_file] = dist.glob("*.whl")
    [sdist_file] = dist.glob("*.tar.gz")
    check_wheel_contents(session, wheel_file)
    check_sdist_contents(session, sdist_file)

    # A fresh virtualenv with nothing but the wheel with its postgres and cron
    # extras (as README tells users to install it), its dependencies and what
    # the example project's settings import.
    venv = tmp / "venv"
    session.run("python", "-m", "venv", str(venv))
    python = str(venv / "bin" / "python")
    leg = LEGS[str(session.python)]
    requirements = [f"{wheel_file}[postgres,cron]", leg.django, "dj-database-url"]
    session.run(python, "-m", "pip", "install", "--quiet", *requirements, external=True)

    # The example project, away from the checkout: its manage.py puts its
    # parent folder on sys.path, which here holds no django_bgtasks.
    site = tmp / "site"
    shutil.copytree(
        ROOT / "example_project",
        site / "example_project",
        ignore=shutil.ignore_patterns("__pycache__", "*.sqlite3*", ".pgdata", ".data"),
    )
    shutil.copy(ROOT / "tests" / "wheel" / "smoke.py", site / "example_project" / "smoke.py")
    env = {
        "BGTASKS_DEMO_DB": "sqlite",
        "DATABASE_URL": None,
        "DJANGO_SETTINGS_MODULE": None,
        "PYTHONPATH": None,
        "COVERAGE_PROCESS_START": None,
        "BGTASKS_CHECKOUT": str(ROOT),
    }
    cwd = site / "example_project"
    with session.chdir(cwd):
        manage = [python, "manage.py"]
        session.run(*manage, "check", "--fail-level", "WARNING", env=env, external=True)
        session.run(*manage, "makemigrations", "--check", "--dry-run", env=env, external=True)
        session.run(*manage, "migrate", "--verbosity", "1", env=env, external=True)
        session.run(python, "smoke.py", env=env, external=True)


def tracked_package_files() -> set[str]:
    """The package's files as git knows them (what a release must ship)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", PACKAGE], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    return {name for name in listed.split("\0") if name}


def check_wheel_contents(session: nox.Session, wheel_file: Path) -> None:
    """The wheel holds django_bgtasks, all of it, and nothing else."""
    with zipfile.ZipFile(wheel_file) as archive:
        names = {name for name in archive.namelist() if not name.endswith("/")}
    dist_info = {name for name in names if name.split("/")[0].endswith(".dist-info")}
    shipped = names - dist_info
    stray = sorted(name for name in shipped if not name.startswith(f"{PACKAGE}/"))
    junk = sorted(name for name in shipped if "__pycache__" in name or name.endswith(".pyc"))
    missing = sorted(tracked_package_files() - shipped)
    untracked = sorted(shipped - tracked_package_files())
    for label, found in [
        ("outside the package", stray),
        ("bytecode", junk),
        ("tracked but missing", missing),
        ("not tracked by git", untracked),
    ]:
        if found:
            session.error(f"wheel: {len(found)} file(s) {label}: {found}")
    for required in ("py.typed", "migrations/0001_initial.py", "apps.py"):
        if f"{PACKAGE}/{required}" not in shipped:
            session.error(f"wheel: {PACKAGE}/{required} is missing")
    if not any(name.endswith("/licenses/LICENSE") for name in dist_info):
        session.error("wheel: the licence file is missing from the metadata")
    session.log(f"wheel: {len(shipped)} package files, all tracked, nothing else")


def check_sdist_contents(session: nox.Session, sdist_file: Path) -> None:
    """The sdist holds the package, its tests and docs, and no local debris."""
    with tarfile.open(sdist_file) as archive:
        names = {
            name.split("/", 1)[1]
            for name in archive.getnames()
            if "/" in name and not archive.getmember(name).isdir()
        }
    missing = sorted(tracked_package_files() - names)
    if missing:
        session.error(f"sdist: tracked package files missing: {missing}")
    for required in (
        "pyproject.toml",
        "README.md",
        "LICENSE",
        "CHANGELOG.md",
        "tests/conftest.py",
    ):
        if required not in names:
            session.error(f"sdist: {required} is missing")
    debris = sorted(
        name
        for name in names
        if any(part in name for part in ("__pycache__", ".venv", ".tmp/", ".sqlite3", ".coverage"))
    )
    if debris:
        session.error(f"sdist: local files shipped: {debris}")
    session.log(f"sdist: {len(names)} files, package complete, no local debris")
