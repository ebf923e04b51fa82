"""The task page: the "front end on another replica".

It is plain HTML and a little JavaScript that follows the API's event stream
(``<prefix>/events/``) under an ASGI server (``serve.py --asgi``), and polls
the JSON API (``django_bgtasks.urls``) every second where the stream answers
501 (runserver, WSGI). Whichever replica serves the page and
whichever answers each poll, all of them read the same lease rows, so the page
shows the same owner, token and progress everywhere.
"""

from __future__ import annotations

import os
import socket

from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import get_script_prefix
from django.views.decorators.csrf import ensure_csrf_cookie

from django_bgtasks import registered_tasks


@staff_member_required
@ensure_csrf_cookie
def tasks_page(request: HttpRequest) -> HttpResponse:
    tasks = [
        {"name": name, "description": task.description}
        for name, task in registered_tasks().items()
    ]
    return render(
        request,
        "demo_site/tasks.html",
        {
            "tasks": tasks,
            "api_root": f"{get_script_prefix()}bgtasks/",
            # Owners are "host:pid:random": the page marks runs owned by the
            # replica that served it.
            "replica": f"{socket.gethostname()}:{os.getpid()}:",
            "replica_label": f"{request.get_host()} (pid {os.getpid()})",
        },
    )
