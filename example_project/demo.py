"""The demo (a placeholder until the demo issue): run one task under its lease."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def manage(*args: str) -> None:
    subprocess.run([sys.executable, str(HERE / "manage.py"), *args], check=True)


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "demo_site.settings")
    manage("migrate", "--verbosity", "0")
    manage(
        "shell", "-c", "from demo_site.tasks import log_cleanup; print(log_cleanup.run(batches=5))"
    )
