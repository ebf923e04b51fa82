"""The signals a lease's holder sends (signals.py): ``lease_claimed``,
``lease_released`` and ``lease_lost``, each with ``sender=BackgroundTask``
and the lease's ``name``, ``owner`` and ``token``; ``lease_released`` adds
the run's ``outcome``, ``lease_lost`` why it was lost."""

from __future__ import annotations

from typing import Any

import pytest

from django_bgtasks import LeaseLost, lease
from django_bgtasks.models import BackgroundTask
from django_bgtasks.signals import lease_claimed, lease_lost, lease_released

# What a receiver was sent: the sender, and the keyword arguments.
Seen = list[tuple[Any, dict[str, Any]]]


def test_signals_tell_claim_and_release(db_alias: str) -> None:
    seen: list[tuple[str, dict[str, Any]]] = []
    receivers = {
        "claimed": lambda **kw: seen.append(("claimed", kw)),
        "released": lambda **kw: seen.append(("released", kw)),
    }
    lease_claimed.connect(receivers["claimed"], dispatch_uid="t-claimed")
    lease_released.connect(receivers["released"], dispatch_uid="t-released")
    try:
        with lease("cleanup", ttl=30) as running:
            pass
    finally:
        lease_claimed.disconnect(dispatch_uid="t-claimed")
        lease_released.disconnect(dispatch_uid="t-released")
    assert [event for event, _ in seen] == ["claimed", "released"]
    assert seen[0][1]["token"] == running.token and seen[1][1]["outcome"] == "succeeded"


def test_each_signal_names_the_lease_and_says_how_it_ended(db_alias: str) -> None:
    claimed: Seen = []
    released: Seen = []
    lost: Seen = []
    watched = {"t-claimed": (lease_claimed, claimed), "t-released": (lease_released, released)}
    watched["t-lost"] = (lease_lost, lost)

    def receiver(seen: Seen) -> Any:
        def receive(sender: Any, signal: Any, **kwargs: Any) -> None:
            seen.append((sender, kwargs))

        return receive

    for uid, (signal, seen) in watched.items():
        signal.connect(receiver(seen), weak=False, dispatch_uid=uid)
    try:
        with pytest.raises(RuntimeError), lease("s-fails", ttl=30) as failing:
            raise RuntimeError("disk on fire")
        with pytest.raises(LeaseLost), lease("s-lost", ttl=30) as taken:
            assert BackgroundTask.objects.force_release("s-lost")
            taken.update({"late": True})  # the renewal is refused
    finally:
        for uid, (signal, _) in watched.items():
            signal.disconnect(dispatch_uid=uid)
    named = [
        {"name": held.name, "owner": held.owner, "token": held.token} for held in (failing, taken)
    ]
    assert claimed == [(BackgroundTask, named[0]), (BackgroundTask, named[1])]
    assert released == [(BackgroundTask, {**named[0], "outcome": "failed"})]
    reason = "the lease was taken over or released by an operator"
    assert lost == [(BackgroundTask, {**named[1], "reason": reason})]
