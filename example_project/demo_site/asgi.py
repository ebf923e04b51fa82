"""The example site for an ASGI server, where the task page's event stream
works: ``uvicorn demo_site.asgi:application`` from example_project/ (under
runserver, WSGI, the page polls the JSON API instead)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo_site.settings")

application = get_asgi_application()
