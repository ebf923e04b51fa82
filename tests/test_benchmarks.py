"""The benchmark scripts refuse bad options before they set anything up:
argparse's usage and the reason on stderr, exit status 2, and nothing run
(they need .venv-bench to run; a refusal needs only the standard library)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.procs import ROOT

PG = "postgres://postgres@127.0.0.1:5432/bgtasks_bench"


@pytest.mark.parametrize(
    ("script", "args", "message"),
    [
        ("drain_ab.py", ["--dsn", PG, "--base", "HEAD", "--task-seconds", "-1"],
         "--task-seconds must be from 0 to 60, not -1.0"),
        ("drain_ab.py", ["--dsn", PG, "--base", "HEAD", "--task-seconds", "nan"],
         "--task-seconds must be from 0 to 60, not nan"),
        ("latency_floor.py", ["--dsn", "sqlite:///bench.sqlite3"],
         "--dsn must be a PostgreSQL database"),
        ("latency_floor.py", ["--dsn", PG, "--samples", "3"],
         "--samples must be at least 10, not 3"),
        ("fair_scale.py", ["--dsn", "sqlite:///bench.sqlite3", "--base", "HEAD"],
         "--dsn must be a PostgreSQL database"),
        ("fair_scale.py", ["--dsn", PG, "--base", "HEAD", "--seconds", "1"],
         "--seconds must be at least 5, not 1.0"),
        ("not_due.py", ["--dsn", "redis://127.0.0.1:6379/0"],
         "--dsn must be a PostgreSQL, MySQL/MariaDB or SQLite database"),
        ("not_due.py", ["--dsn", PG, "--ready", "8"],
         "--ready must be at least 50 (five claims of 8 and more), not 8"),
        ("not_due.py", ["--dsn", PG, "--rounds", "0"],
         "--waiting must be 0 or more, and --rounds 1 or more"),
    ],
)  # fmt: skip
def test_a_benchmark_refuses_a_bad_option_before_anything_runs(
    script: str, args: list[str], message: str
) -> None:
    done = subprocess.run(
        [sys.executable, f"benchmarks/{script}", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr and done.stderr.startswith("usage: "), done.stderr
    assert done.stdout == ""
