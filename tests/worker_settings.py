"""The settings of tests/procs.py's worker processes as a settings module,
for a process that a test starts with ``--settings tests.worker_settings``
(tests/management/test_bgtasks.py): the test database's, and the ``BGTASKS_*``
settings the test chose, from the environment (``tests.procs.worker_env``)."""

from __future__ import annotations

import json
import os

from tests.procs import ENV_DB, ENV_SETTINGS, WORKER_APPS

INSTALLED_APPS = WORKER_APPS
DATABASES = {"default": json.loads(os.environ[ENV_DB])}
USE_TZ = True
globals().update(json.loads(os.environ.get(ENV_SETTINGS, "{}")))
