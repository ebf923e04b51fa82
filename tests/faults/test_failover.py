"""A PostgreSQL failover (issue 17, part 2): the lease database is a primary
with a streaming-replication standby (tests/faults/replication.py); the
app connects to both through libpq's multi-host string with
``target_session_attrs=read-write``. The primary and all its processes are
SIGKILLed while real worker processes hold leases and write fenced data, and
the standby is promoted (``pg_ctl promote``).

* **Synchronous** (the standby in ``synchronous_standby_names``,
  ``synchronous_commit = on``): the torture workers of tests/faults/torture
  run through the failover, promoted at once or only after the ttl, and the
  torture run's invariants are checked from the promoted server: no token
  handed out twice, no two holders' fenced transactions overlap, no
  acknowledged fenced write lost; and every holder open at the kill either
  continued on the new primary or declared its lease lost by its renew
  deadline, before anyone else claimed it.
* **Asynchronous**: the anomaly, made deterministic. The standby stops
  receiving WAL (as a lagging standby); a claim and its fenced write are
  acknowledged by the primary; the primary dies and the standby is promoted.
  The test expects the acknowledged claim and write to be gone and the same
  token to be handed out again to someone else: what
  ``BGTASKS_REQUIRE_SYNC_REPLICATION`` and its check (bgtasks.E031) are for.
  The same sequence with the standby synchronous: the claim made while the
  standby is away is never answered, so the token C gets was nobody's.

Each test starts its own two servers and stops them (watchdogs included),
whatever happens.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.faults.replication import Pair, Server, logs, replicated_pair
from tests.faults.torture.invariants import Evidence, check
from tests.faults.torture.processes import Scenario, db_env

# Two servers of its own and a SIGKILLed primary: CPU-bound timings, run
# alone (the serial stage).
pytestmark = pytest.mark.serial

NAME = "job"
WORKERS = 4
TTL = 3.0
WORK_SECONDS = 4.0  # at least, of fenced work before the kill and after the promotion
COUNTED = ("succeeded", "failed", "cancelled")


def rows(server: Server, sql: str) -> list[dict[str, Any]]:
    """Rows as dicts, read from ``server`` directly."""
    import psycopg
    from psycopg.rows import dict_row

    with psycopg.connect(
        host=server.host, port=server.port, user="postgres", dbname="postgres", autocommit=True
    ) as conn:
        return list(conn.cursor(row_factory=dict_row).execute(sql).fetchall())


def setup_database(env: dict[str, str], server: Server) -> None:
    migrate = Scenario(env, "migrate")
    try:
        migrate.result(timeout=60)
    finally:
        migrate.kill()
    server.query("INSERT INTO testapp_counter (name, value) VALUES (%s, 0)", NAME)


def manage(env: dict[str, str], *args: str) -> tuple[int, str]:
    """``manage.py <args>`` as the workers are set up; its status and output."""
    import subprocess
    import sys

    from tests.procs import ROOT

    done = subprocess.run(
        [sys.executable, "-m", "tests.faults.torture.workers", "manage", *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode, done.stdout + done.stderr


def wait_for_work(server: Server, *, at_least: int, timeout: float = 30) -> None:
    """For WORK_SECONDS, and until the ledger has ``at_least`` fenced writes."""
    began = time.monotonic()
    while True:
        [(count,)] = server.query("SELECT count(*) FROM testapp_ledgerentry")
        elapsed = time.monotonic() - began
        if count >= at_least and elapsed >= WORK_SECONDS:
            return
        if elapsed > timeout:
            raise AssertionError(f"{count} fenced writes after {elapsed:.0f} s, not {at_least}")
        time.sleep(0.1)


def a_holder_is_working(directory: Path) -> bool:
    """Whether a torture worker's journal shows a claim it has not ended yet."""
    for journal in Evidence.journals_in(directory).values():
        claims = [e["token"] for e in journal if e["e"] == "claim"]
        ended = {e["token"] for e in journal if e["e"] in ("body_end", "exit")}
        if claims and claims[-1] not in ended:
            return True
    return False


def sync_check(pair: Pair) -> tuple[int, str]:
    """``manage.py check --database default`` with BGTASKS_REQUIRE_SYNC_REPLICATION."""
    env = db_env(pair.database(), BGTASKS_REQUIRE_SYNC_REPLICATION=True)
    return manage(env, "check", "--database", "default")


@pytest.mark.parametrize("promote_after", [0.0, 1.5 * TTL], ids=["at-once", "after-the-ttl"])
def test_a_synchronous_failover_keeps_every_lease_guarantee(
    tmp_path: Path, promote_after: float
) -> None:
    with replicated_pair() as pair:
        try:
            _synchronous_failover(pair, tmp_path, promote_after)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{logs(pair)}") from exc


def _synchronous_failover(pair: Pair, directory: Path, promote_after: float) -> None:
    pair.make_synchronous("on")
    env = db_env(pair.database())
    setup_database(env, pair.primary)
    status, output = sync_check(pair)
    assert status == 0 and "bgtasks.E03" not in output, output
    # The check run against the standby alone (no target_session_attrs).
    standby_only = {
        **pair.database(),
        "HOST": pair.standby.host,
        "PORT": str(pair.standby.port),
        "OPTIONS": {},
    }
    status, output = manage(
        db_env(standby_only, BGTASKS_REQUIRE_SYNC_REPLICATION=True),
        "check",
        "--database",
        "default",
    )
    assert status != 0 and "bgtasks.E033" in output, output

    workers = [
        Scenario(env, "torture", str(directory / f"w{i}.jsonl"), NAME, TTL, i)
        for i in range(WORKERS)
    ]
    try:
        for worker in workers:
            worker.wait_for("ready", timeout=60)
        wait_for_work(pair.primary, at_least=3)
        deadline = time.monotonic() + 10
        while not a_holder_is_working(directory):  # kill it mid-run
            assert time.monotonic() < deadline, "no worker held the lease for 10 s"
            time.sleep(0.005)
        [(sync_state,)] = pair.primary.query("SELECT sync_state FROM pg_stat_replication")
        assert sync_state == "sync"
        [(before,)] = pair.primary.query("SELECT count(*) FROM testapp_ledgerentry")
        stopped_at = pair.primary.clock()
        killed_mono = time.monotonic()
        pair.primary.kill()
        time.sleep(promote_after)
        up_at = pair.standby.clock()  # nothing commits before the promotion
        pair.promote()
        up_mono = time.monotonic()
        wait_for_work(pair.standby, at_least=before + 3)
        for worker in workers:
            worker.send("stop")
        for worker in workers:
            worker.result(timeout=3 * TTL + 30)
    finally:
        for worker in workers:
            worker.kill()

    new_primary = pair.standby
    # The promoted server has no standby of its own: the check says so.
    status, output = sync_check(pair)
    assert status != 0 and "bgtasks.E031" in output, output
    time.sleep(TTL + 0.2)  # every worker stopped: a ttl later nothing reads as running
    still_running = [
        row["name"]
        for row in rows(
            new_primary,
            "SELECT name FROM django_bgtasks_backgroundtask WHERE running "
            "AND clock_timestamp() - updated_at < ttl * interval '1 second'",
        )
    ]
    status, output = manage(
        env,
        "shell",
        "-c",
        "from django_bgtasks.models import BackgroundTask; BackgroundTask.objects.expire_stale()",
    )
    assert status == 0, output
    [lease_row] = rows(new_primary, "SELECT token FROM django_bgtasks_backgroundtask")
    ledger = rows(new_primary, "SELECT * FROM testapp_ledgerentry")
    evidence = Evidence(
        ttl=TTL,
        ledger=ledger,
        counter=new_primary.query("SELECT value FROM testapp_counter WHERE name = %s", NAME)[0][0],
        history=rows(new_primary, "SELECT * FROM django_bgtasks_taskrun"),
        last_token=lease_row["token"],
        still_running=still_running,
        journals=Evidence.journals_in(directory),
        events=[
            {
                "kind": "restart",
                "outage": up_mono - killed_mono,
                "stopped_at": stopped_at,
                "up_at": up_at,
            }
        ],
    )
    verdict = check(evidence)
    assert verdict.violations == []
    assert verdict.inconclusive == []

    # No token handed out twice: each claimed token is in one journal only.
    claims: dict[int, list[str]] = {}
    for owner, journal in evidence.journals.items():
        for event in journal:
            if event["e"] == "claim":
                claims.setdefault(event["token"], []).append(owner)
    assert all(len(owners) == 1 for owners in claims.values()), claims

    # Every holder open at the kill continued on the new primary (a fenced
    # write or its release there) or declared the lease lost by its renew
    # deadline: within a ttl of the kill (its last renewal was sent before
    # it), and before anyone else claimed the lease.
    open_at_kill = []
    for owner, journal in evidence.journals.items():
        claimed = [e for e in journal if e["e"] == "claim" and e["t"] < killed_mono]
        if not claimed:
            continue
        token = claimed[-1]["token"]
        ended = [e for e in journal if e["e"] == "exit" and e["token"] == token]
        if ended and ended[0]["t"] < killed_mono:
            continue
        open_at_kill.append((owner, token))
        fate = "continued"
        lost = [e for e in journal if e["e"] == "lost" and e["token"] == token]
        continued = any(
            (e["e"] == "ok" and e["token"] == token and e["t"] > up_mono)
            or (e["e"] == "released" and e["token"] == token and e["outcome"] in COUNTED)
            for e in journal
        )
        if promote_after > TTL:
            assert lost and not continued, (owner, token, journal)
        assert lost or continued, (owner, token, journal)
        if lost:
            fate = f"declared lost {lost[0]['t'] - killed_mono:.2f} s after the kill"
            assert lost[0]["t"] <= killed_mono + TTL + 0.25, (owner, token, lost)
            later_claims = [
                e["t"]
                for other, entries in evidence.journals.items()
                for e in entries
                if other != owner and e["e"] == "claim" and e["token"] > token
            ]
            assert all(t >= lost[0]["t"] for t in later_claims), (owner, token, lost)
    assert len(open_at_kill) == 1, open_at_kill  # one lease: one holder at the kill
    # For docs/reliability.md (shown with -s).
    print(
        f"\nsynchronous failover, promoted {promote_after:g} s after the kill: "
        f"outage {up_mono - killed_mono:.2f} s (ttl {TTL:g} s); the holder {fate}; "
        f"tokens {evidence.last_token}; fenced writes {before} before the kill, "
        f"{len(ledger)} in all; violations {len(verdict.violations)}\n{verdict.table()}"
    )

    # The run did what it claims: fenced work on both sides of the failover.
    assert before >= 3
    assert len(ledger) >= before + 3, (before, len(ledger))


def test_an_asynchronous_failover_loses_an_acknowledged_claim_and_hands_its_token_out_again(
    tmp_path: Path,
) -> None:
    with replicated_pair() as pair:
        try:
            _asynchronous_failover(pair)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{logs(pair)}") from exc


def _claim(env: dict[str, str], then: str) -> tuple[Scenario, dict[str, Any]]:
    claimant = Scenario(env, "claim_and_write", NAME, TTL, then)
    claimant.wait_for("ready", timeout=60)
    claimant.go()
    line = claimant.wait_for("result", timeout=60)
    return claimant, json.loads(line.split(" ", 1)[1])


def _asynchronous_failover(pair: Pair) -> None:
    env = db_env(pair.database())
    setup_database(env, pair.primary)
    status, output = sync_check(pair)
    assert status != 0 and "bgtasks.E031" in output, output

    # A claims, writes and releases; the standby has all of it.
    first, a = _claim(env, "release")
    first.kill()
    assert a["claimed"] and a["released"] and (a["token"], a["value"]) == (1, 1)
    pair.wait_streaming(sync=False)

    # The standby falls behind; B's claim and fenced write are acknowledged
    # by the primary alone, and B goes on holding the lease.
    pair.detach_standby()
    holder, b = _claim(env, "hold")
    try:
        assert b["claimed"] and (b["token"], b["value"]) == (2, 2)
        assert pair.primary.query("SELECT token, owner FROM django_bgtasks_backgroundtask") == [
            (2, b["owner"])
        ]

        pair.primary.kill()
        pair.promote()

        # C finds the lease free (A released it; B's claim never reached the
        # standby) and is handed B's token, while B still believes it holds it.
        third, c = _claim(env, "release")
        third.kill()
        assert holder.process.poll() is None  # B: alive, holding token 2
    finally:
        holder.kill()
    assert c["claimed"] and c["owner"] != b["owner"]
    assert c["token"] == b["token"] == 2  # the same token, handed out twice
    assert c["value"] == b["value"] == 2  # the same increment, done twice

    # From the promoted database: B's acknowledged claim and its acknowledged
    # fenced write are gone; history knows only A's run and C's.
    new_primary = pair.standby
    ledger = new_primary.query("SELECT token, owner, value FROM testapp_ledgerentry ORDER BY id")
    assert ledger == [(1, a["owner"], 1), (2, c["owner"], 2)]
    assert (2, b["owner"], 2) not in ledger
    history = new_primary.query(
        "SELECT token, owner, outcome FROM django_bgtasks_taskrun ORDER BY token"
    )
    assert history == [(1, a["owner"], "succeeded"), (2, c["owner"], "succeeded")]


def test_a_synchronous_standby_that_falls_behind_holds_commits_back_instead_of_losing_them(
    tmp_path: Path,
) -> None:
    """The asynchronous test's sequence, with the standby synchronous: B's
    claim is not acknowledged while the standby is away (its commit waits),
    so when C is handed token 2 after the failover, nobody else was."""
    with replicated_pair() as pair:
        try:
            _synchronous_standby_falls_behind(pair)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{logs(pair)}") from exc


def _synchronous_standby_falls_behind(pair: Pair) -> None:
    pair.make_synchronous("on")
    env = db_env(pair.database())
    setup_database(env, pair.primary)

    first, a = _claim(env, "release")
    first.kill()
    assert a["claimed"] and a["released"] and (a["token"], a["value"]) == (1, 1)

    pair.detach_standby()
    holder = Scenario(env, "claim_and_write", NAME, TTL, "hold")
    try:
        holder.wait_for("ready", timeout=60)
        holder.go()
        # The claim's commit waits for the standby: no answer, for two ttls.
        with pytest.raises(AssertionError, match="did not say 'result'"):
            holder.wait_for("result", timeout=2 * TTL)
        pair.primary.kill()
        pair.promote()
        third, c = _claim(env, "release")
        third.kill()
        # B's connection died with the primary: its claim failed, unanswered.
        with pytest.raises(AssertionError, match="exited"):
            holder.wait_for("result", timeout=30)
    finally:
        holder.kill()
    assert not any(line.startswith("result") for line in holder.lines), holder.lines
    assert c["claimed"] and (c["token"], c["value"]) == (2, 2)

    new_primary = pair.standby
    ledger = new_primary.query("SELECT token, owner, value FROM testapp_ledgerentry ORDER BY id")
    assert ledger == [(1, a["owner"], 1), (2, c["owner"], 2)]
    history = new_primary.query(
        "SELECT token, owner, outcome FROM django_bgtasks_taskrun ORDER BY token"
    )
    assert history == [(1, a["owner"], "succeeded"), (2, c["owner"], "succeeded")]
