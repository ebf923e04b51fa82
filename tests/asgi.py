"""The test project over ASGI, for a real uvicorn process (tests/asgiserver.py).

``tests.settings`` with the databases of the test run that started it (the
test databases, from ``BGTASKS_TEST_DATABASES``) and the ``BGTASKS_*``
settings in ``BGTASKS_TEST_SETTINGS``, both JSON.
"""

from __future__ import annotations

import json
import os

from django.conf import settings

from tests import settings as test_settings

overrides = {name: getattr(test_settings, name) for name in dir(test_settings) if name.isupper()}
overrides["DATABASES"] = json.loads(os.environ["BGTASKS_TEST_DATABASES"])
overrides.update(json.loads(os.environ.get("BGTASKS_TEST_SETTINGS", "{}")))
settings.configure(**overrides)

from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402  (after the settings)

# Static files too, as runserver serves them: the admin's pages need its JS.
application = ASGIStaticFilesHandler(get_asgi_application())
