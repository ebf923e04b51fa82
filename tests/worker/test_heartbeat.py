"""A worker's own row in the workers' table (worker/heartbeat.py), on every
database: what a beat states, when it is written again, that a worker beats
while it waits between polls, that a beat forgets the rows of workers silent
for long (at most once a minute), and that a stopped worker's row goes."""

from __future__ import annotations

import os
import time

import pytest

from django_bgtasks.core.leases import host_name
from django_bgtasks.limits import FORGET_WORKERS_AFTER
from django_bgtasks.models import Worker as WorkerRow
from django_bgtasks.worker import heartbeat
from django_bgtasks.worker.loop import Worker
from tests.dbtools import backdate_worker
from tests.worker.test_loop import idle_worker, make_task, objects


def test_a_worker_beats_while_it_waits_between_polls(
    db_alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A poll longer than its ttl must not make an idle, live worker look silent."""
    from django_bgtasks.worker import heartbeat

    monkeypatch.setattr(heartbeat, "WORKER_BEAT_SECONDS", 0.2)
    task = make_task("w-idle", lambda lease: None)
    with idle_worker(task) as worker:
        assert worker.ttl == pytest.approx(0.6)
        for _ in range(8):  # 2 s: three of its ttls, in a single wait of 30 s
            time.sleep(0.25)
            [state] = [w for w in objects.work.workers() if w.id == worker.id]
            assert not state.silent and state.age < 0.6


def test_a_worker_states_its_host_as_its_owner_id_does(
    db_alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One cut of the host name (limits.HOST_LENGTH) for the worker's row and
    its id (the default owner), so that an operator can match the two."""
    import socket

    from django_bgtasks.core import leases
    from django_bgtasks.limits import HOST_LENGTH

    monkeypatch.setattr(socket, "gethostname", lambda: "h" * 300)
    monkeypatch.setattr(leases, "_owner_for_pid", None)  # a fresh owner
    worker = Worker([make_task("w-host", lambda lease: None)], poll=1)
    worker.tick()
    [state] = [w for w in objects.work.workers() if w.id == worker.id]
    assert state.host == worker.id.rsplit(":", 2)[0] == "h" * HOST_LENGTH


def _row(alias: str, worker: str) -> WorkerRow:
    return WorkerRow.objects.using(alias).get(id=worker)


def test_a_beat_states_the_workers_runs_and_is_written_again_when_due_or_changed(
    db_alias: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A beat the same as the last, within a beat of it, writes nothing; a
    change of the runs going, or a forced beat, is written at once."""
    monkeypatch.setattr(heartbeat, "WORKER_BEAT_SECONDS", 60.0)  # (read as it is made)
    beats = heartbeat.Heartbeat("hb:1:x", ["b-task", "a-task"], 2)
    assert (beats.every, beats.ttl) == (60.0, 180.0)
    assert beats.due_in() <= 0  # never beat: due now
    beats.beat([])
    row = _row(db_alias, "hb:1:x")
    assert (row.host, row.pid, row.tasks, row.concurrency, row.running, row.ttl) == (
        host_name(),
        os.getpid(),
        ["a-task", "b-task"],
        2,
        [],
        180.0,
    )
    assert 50 < beats.due_in() <= 60  # (the beat's round trips came after its time)

    backdate_worker(db_alias, "hb:1:x", 10)  # so that a write shows
    before = _row(db_alias, "hb:1:x").updated_at
    beats.beat([])
    assert _row(db_alias, "hb:1:x").updated_at == before  # the same, within a beat
    beats.beat(["a-task"])
    row = _row(db_alias, "hb:1:x")
    assert row.running == ["a-task"] and row.updated_at > before
    backdate_worker(db_alias, "hb:1:x", 10)
    before = _row(db_alias, "hb:1:x").updated_at
    beats.beat(["a-task"], force=True)
    assert _row(db_alias, "hb:1:x").updated_at > before

    beats.gone()
    assert not WorkerRow.objects.using(db_alias).filter(id="hb:1:x").exists()
    beats.gone()  # (no row: nothing to say)


def test_a_beat_forgets_workers_silent_for_long_at_most_once_a_minute(
    db_alias: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="django_bgtasks.worker")
    for worker in ("dead-1", "dead-2"):
        objects.work.beat(
            worker=worker, host="h", pid=1, tasks=[], concurrency=1, running=[], ttl=10
        )
    backdate_worker(db_alias, "dead-1", FORGET_WORKERS_AFTER + 1)
    beats = heartbeat.Heartbeat("hb:1:x", [], 1)

    def listed() -> list[str]:
        return sorted(worker.id for worker in objects.work.workers())

    beats.beat([])
    assert listed() == ["dead-2", "hb:1:x"]
    assert [r.getMessage() for r in caplog.records if "forgot" in r.getMessage()] == [
        f"worker hb:1:x: forgot 1 worker(s) silent for more than {FORGET_WORKERS_AFTER:g} s"
    ]
    backdate_worker(db_alias, "dead-2", FORGET_WORKERS_AFTER + 1)
    beats.beat(["a-task"])  # written, but within a minute of the last forgetting
    assert listed() == ["dead-2", "hb:1:x"]
    monkeypatch.setattr(heartbeat, "FORGET_EVERY_SECONDS", 0.0)
    beats.beat(["b-task"])
    assert listed() == ["hb:1:x"]
