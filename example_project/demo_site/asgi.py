"""The example site for an ASGI server, where the task page's event stream
works: ``uvicorn demo_site.asgi:application`` from example_project/, or
``python example_project/serve.py --asgi`` for two replicas (under
runserver, WSGI, the page polls the JSON API instead). With ``DEBUG`` on it
serves the static files too, as runserver does, so the admin has its styles."""

import os

from django.conf import settings
from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo_site.settings")

application = get_asgi_application()
if settings.DEBUG:
    application = ASGIStaticFilesHandler(application)
