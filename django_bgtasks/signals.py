"""Signals the runner sends. Each has ``sender=BackgroundTask`` and the keyword
arguments ``name``, ``owner`` and ``token``; ``lease_lost`` adds ``reason`` and
``lease_released`` adds ``outcome``.

``lease_lost`` may be sent from the heartbeat thread, so receivers must be quick
and thread-safe.
"""

from __future__ import annotations

from django.dispatch import Signal

lease_claimed = Signal()
lease_lost = Signal()
lease_released = Signal()
