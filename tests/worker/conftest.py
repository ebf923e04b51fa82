"""Fixtures of the worker's tests (tests/worker/): what a worker's queue
threads read at their idle polls (``probes``), for tests/worker/test_idle.py
and tests/worker/test_queue_threads.py."""

from __future__ import annotations

from typing import Any

import pytest

from django_bgtasks.queue.manager import QueueManager


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """What each idle poll's read (``any_ready``) answered."""
    answered: list[bool] = []
    any_ready = QueueManager.any_ready

    def counting(self: QueueManager, **kwargs: Any) -> bool:
        answered.append(any_ready(self, **kwargs))
        return answered[-1]

    monkeypatch.setattr(QueueManager, "any_ready", counting)
    return answered
