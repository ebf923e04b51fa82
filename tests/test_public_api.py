"""The package's own names (django_bgtasks/__init__.py): what ``import
django_bgtasks`` exports, each re-exported lazily as the object its module
defines, without importing the runner, the models or the SQL before use.

What each name does is tested next to the module that defines it:
core/test_runner.py (``lease``, ``RunningLease``), background/test_functions.py
(``background_task``), core/test_states.py (``TaskState``), core/test_leases.py
(``BackgroundTask.objects``, ``TaskRun.objects``; the operator's side of
them: core/test_requests.py), test_exceptions.py (the errors)."""

from __future__ import annotations

import json

import pytest

import django_bgtasks
from django_bgtasks.background import functions as tasks
from django_bgtasks.core import runner, states
from tests.procs import run_python

# --- the package's names, re-exported lazily ---------------------------------------------

# The module that defines each lazily re-exported name: the package hands out
# that very object, not a copy or a wrapper.
LAZY_NAMES = {
    "lease": runner,
    "alease": runner,
    "RunningLease": runner,
    "Lease": states,
    "TaskState": states,
    "background_task": tasks,
    "get_task": tasks,
    "registered_tasks": tasks,
    "BackgroundTaskFunction": tasks,
}


@pytest.mark.parametrize("name", sorted(LAZY_NAMES))
def test_a_lazy_name_is_the_object_its_module_defines(name: str) -> None:
    module = LAZY_NAMES[name]
    defined = getattr(module, name)
    assert defined.__module__ == module.__name__  # defined there, not imported
    assert getattr(django_bgtasks, name) is defined
    assert name in django_bgtasks.__all__


def test_every_exported_name_resolves_and_nothing_else_does() -> None:
    for name in django_bgtasks.__all__:
        assert getattr(django_bgtasks, name) is not None, name
    with pytest.raises(AttributeError, match="has no attribute 'LeaseManager'"):
        django_bgtasks.LeaseManager  # noqa: B018  (the lookup is the test)


# Run in a fresh interpreter: in this one, Django's set-up imported everything.
IMPORT_ALONE = """
import json, sys
import django_bgtasks
loaded_before_setup = sorted(m for m in sys.modules if m.startswith("django_bgtasks."))
try:
    django_bgtasks.lease
except Exception as exc:  # the models need the app registry
    refused_before_setup = type(exc).__name__
else:
    refused_before_setup = None
import django
django.setup()
from django_bgtasks.core import runner
print(json.dumps({
    "loaded_before_setup": loaded_before_setup,
    "refused_before_setup": refused_before_setup,
    "same_object_after_setup": django_bgtasks.lease is runner.lease,
}))
"""


def test_importing_the_package_alone_imports_no_runner_models_or_sql() -> None:
    """``import django_bgtasks`` before Django is set up (in a settings file,
    say) is safe: it loads the exceptions only; the runner, the models and the
    SQL come on first use, and are then the very objects they define."""
    done = run_python(IMPORT_ALONE, settings="tests.settings", timeout=60)
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["loaded_before_setup"] == ["django_bgtasks.exceptions"]
    assert found["refused_before_setup"] == "AppRegistryNotReady"
    assert found["same_object_after_setup"] is True
