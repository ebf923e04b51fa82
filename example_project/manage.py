#!/usr/bin/env python
"""The example site's manage.py."""

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    # Run from anywhere: the checkout (django_bgtasks) and this folder (demo_site).
    here = Path(__file__).resolve().parent
    sys.path[:0] = [str(here), str(here.parent)]
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo_site.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
