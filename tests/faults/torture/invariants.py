"""The torture run's verdict: every invariant, checked after the run from the
database (ledger, counter, lease row, run history), the workers' journals and
the chaos process's record of the faults it injected.

A *violation* is a broken guarantee. An *inconclusive* fault is one whose
effect couldn't be observed cleanly (say, a paused worker's statements never
settled on the server); the test fails on either, for different reasons.

Some outcomes are ambiguous by nature and are counted, not failed: a commit
(of a fenced write, a claim or a release) that the database made durable
while its client died or lost the connection before hearing back. The
database is then right and the client's journal is incomplete.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
from collections import Counter as Tally
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.utils.dateparse import parse_datetime

HOLDER_OUTCOMES = ("succeeded", "failed", "cancelled")


@dataclass
class Evidence:
    ttl: float
    ledger: list[dict[str, Any]]  # LedgerEntry rows
    counter: int  # the Counter row's value
    history: list[dict[str, Any]]  # TaskRun rows of the task
    last_token: int  # the lease row's token: the last one handed out
    still_running: list[str]  # leases reading as running after the run (+ a ttl)
    journals: dict[str, list[dict[str, Any]]]  # owner -> events
    events: list[dict[str, Any]]  # the chaos process's record

    @classmethod
    def journals_in(cls, directory: Path) -> dict[str, list[dict[str, Any]]]:
        journals = {}
        for path in sorted(directory.glob("w*.jsonl")):
            entries = []
            for line in path.read_text().splitlines():
                try:
                    entries.append(json.loads(line))
                except json.JSONDecodeError:  # a SIGKILL mid-write
                    continue
            if entries and entries[0]["e"] == "start":
                journals[entries[0]["owner"]] = entries
        return journals

    @classmethod
    def events_in(cls, directory: Path) -> list[dict[str, Any]]:
        path = directory / "events.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()]


@dataclass
class Verdict:
    counts: dict[str, Any] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    inconclusive: list[str] = field(default_factory=list)

    def table(self) -> str:
        rows = [("what", "count"), ("---", "---:")]
        rows += [(label, str(value)) for label, value in self.counts.items()]
        rows.append(("**violations (must be 0)**", f"**{len(self.violations)}**"))
        return "\n".join(f"| {a} | {b} |" for a, b in rows)


def _when(value: Any) -> dt.datetime:
    if isinstance(value, dt.datetime):
        return value
    parsed = parse_datetime(value)
    assert parsed is not None, value
    return parsed


def check(evidence: Evidence) -> Verdict:
    verdict = Verdict()
    violation = verdict.violations.append
    ttl = evidence.ttl
    ledger = evidence.ledger
    journals = evidence.journals
    events = evidence.events
    history = {run["token"]: run for run in evidence.history}

    def journal(owner: str) -> list[dict[str, Any]]:
        return journals.get(owner, [])

    def has(owner: str, event: str, token: int) -> bool:
        return any(e["e"] == event and e.get("token") == token for e in journal(owner))

    killed = {e["owner"] for e in events if e["kind"] == "kill"}

    # 1. No two fenced transactions overlap in time (database clock).
    by_start = sorted(ledger, key=lambda entry: (_when(entry["began_at"]), entry["id"]))
    for before, after in itertools.pairwise(by_start):
        if _when(after["began_at"]) < _when(before["ended_at"]):
            violation(f"fenced transactions overlap: {before} and {after}")

    # 2. Tokens in the ledger strictly increase: in commit order a token never
    #    goes back, so once a newer holder has written, no older one does.
    #    Every entry was written by the owner its token was issued to.
    by_value = sorted(ledger, key=lambda entry: entry["value"])
    for before, after in itertools.pairwise(by_value):
        if after["token"] < before["token"]:
            violation(f"token went back in the ledger: {before} then {after}")
    for entry in ledger:
        run = history.get(entry["token"])
        if run is not None and run["owner"] != entry["owner"]:
            violation(f"ledger entry by {entry['owner']} with token {entry['token']} of {run}")

    # 3. The ledger count equals the committed fenced increments: the counter
    #    and the ledger agree, with no gap or repeat; every commit a worker
    #    was told about is there, and nothing else is, but for commits whose
    #    client died or lost its connection before hearing back.
    values = [entry["value"] for entry in by_value]
    if values != list(range(1, len(values) + 1)):
        violation(f"ledger values are not 1..{len(values)}: lost or repeated increments")
    if evidence.counter != len(ledger):
        violation(f"counter is {evidence.counter} but the ledger has {len(ledger)} entries")
    in_ledger = {(e["owner"], e["token"], e["value"]) for e in ledger}
    acknowledged: set[tuple[str, int, int]] = set()
    attempted: dict[tuple[str, int, int], bool] = {}  # -> the client heard of a failure
    for owner, entries in journals.items():
        for e in entries:
            key = (owner, e.get("token"), e.get("value"))
            if e["e"] == "ok":
                acknowledged.add(key)  # type: ignore[arg-type]
            elif e["e"] == "try":
                attempted.setdefault(key, False)  # type: ignore[arg-type]
            elif e["e"] == "err":
                attempted[key] = True  # type: ignore[index]
    for key in sorted(acknowledged - in_ledger):
        violation(f"a commit its worker was told about is not in the ledger: {key}")
    ambiguous = 0
    for key in sorted(in_ledger - acknowledged):
        owner = key[0]
        if key in attempted and (attempted[key] or owner in killed):
            ambiguous += 1
        else:
            violation(f"a ledger entry that no worker committed: {key}")

    # 4. Every worker paused past its ttl while holding the lease was told
    #    LeaseLost, the database refused its late fence, and no fenced write
    #    with its token that began after the pause committed. (One that had
    #    fenced before the pause commits when the worker resumes: the lease
    #    row stayed locked throughout, so nobody could take over or write in
    #    between. "Began" is when fence() was called, on the monotonic clock
    #    that the worker and the chaos process share.)
    pauses = [e for e in events if e["kind"] == "pause"]
    holder_pauses = [e for e in pauses if e["token"] is not None and e["seconds"] > ttl]
    for pause in pauses:
        if not pause["settled"]:
            verdict.inconclusive.append(f"paused worker's statements never settled: {pause}")
    held_across_pause = 0
    for pause in holder_pauses:
        owner, token = pause["owner"], pause["token"]
        held_across_pause += sum(
            1
            for e in journal(owner)
            if e["e"] == "ok" and e["token"] == token and e["t"] >= pause["stopped_mono"]
        )
        if not has(owner, "lost", token):
            violation(f"paused past the ttl but never told LeaseLost: {pause}")
        # Only a fence called after the pause began: a runner can give up at
        # its renew deadline a moment before the database's lease expires, and
        # a zombie fence in that moment is rightly accepted. The chaos process
        # may then pause that worker while the row still shows its token.
        for e in journal(owner):
            if (
                e["e"] == "late"
                and e["token"] == token
                and e["accepted"]
                and e["fence_called"] >= pause["stopped_mono"]
            ):
                violation(f"the database accepted a paused holder's late fence: {pause}")
        for e in journal(owner):
            if (
                e["e"] == "try"
                and e["token"] == token
                and e["fence_called"] >= pause["stopped_mono"]
                and (owner, token, e["value"]) in in_ledger
            ):
                violation(f"a write with token {token} began after its holder's pause: {e}")
    #    The same for the holders cut off by a database restart (an outage
    #    longer than the ttl): every run open when the server stopped was
    #    given up by its holder (told LeaseLost), unless the holder was killed.
    #    Which worker held the lease can't be read at the very moment of the
    #    stop (a release may slip in between), so history decides. Nothing
    #    commits while the server is down, so a run that started before it
    #    came back up (``up_at``) and was ended by a commit at or after that
    #    was open across the outage. A ``lost`` run is recorded as of its last
    #    heartbeat instead: it was open at the stop if that heartbeat was
    #    younger than the ttl when the holder was read, just before the stop.
    cut_off = 0
    for restart in (e for e in events if e["kind"] == "restart"):
        if restart["outage"] <= ttl:
            continue
        stop, up = _when(restart["stopped_at"]), _when(restart["up_at"])
        for run in evidence.history:
            started, finished = _when(run["started_at"]), _when(run["finished_at"])
            if run["outcome"] == "lost":
                spanned = started < up and finished + dt.timedelta(seconds=ttl) > stop
            else:
                spanned = started < up <= finished
            if not spanned or run["owner"] in killed:
                continue
            cut_off += 1
            if not has(run["owner"], "lost", run["token"]):
                violation(
                    f"the holder cut off by the restart never gave the lease up: "
                    f"token {run['token']} of {run['owner']}, {restart}"
                )

    # 5. No lease stays running once its holder is dead and the ttl has passed.
    kills = [e for e in events if e["kind"] == "kill"]
    for kill in kills:
        if kill["still_running_after_ttl"]:
            violation(f"a dead holder's lease still read as running a ttl later: {kill}")
        if not kill["sessions_ended"]:
            verdict.inconclusive.append(f"a killed worker's sessions never ended: {kill}")
    for name in evidence.still_running:
        violation(f"lease {name!r} still reads as running a ttl after every worker stopped")

    # 6. Every run is in history exactly once, with a true outcome.
    tokens = sorted(history)
    if tokens != list(range(1, evidence.last_token + 1)):
        missing = sorted(set(range(1, evidence.last_token + 1)) - set(tokens))
        violation(f"history is not one run per token 1..{evidence.last_token}: missing {missing}")
    unheard = 0
    for token, run in history.items():
        owner, outcome = run["owner"], run["outcome"]
        released = [e for e in journal(owner) if e["e"] == "released" and e["token"] == token]
        ended = [e for e in journal(owner) if e["e"] == "body_end" and e["token"] == token]
        if released and released[0]["outcome"] != outcome:
            violation(f"run {token} released as {released[0]['outcome']}, recorded as {outcome}")
        elif outcome in HOLDER_OUTCOMES and not released:
            # The release committed but its holder never heard back.
            if ended and ended[-1]["how"] == outcome:
                unheard += 1
            else:
                violation(f"run {token} recorded as {outcome}, but its holder never ended so")
        elif outcome == "lost" and not (
            has(owner, "lost", token) or owner in killed or not has(owner, "claim", token)
        ):
            violation(f"run {token} recorded as lost, but its holder neither lost it nor died")
        elif outcome == "released-by-operator" and released:
            violation(f"run {token} recorded as force-released, but its holder released it")
    outcomes = Tally(run["outcome"] for run in history.values())
    releases = [e for e in events if e["kind"] == "release"]
    cancels = [e for e in events if e["kind"] == "cancel"]
    for action in releases + cancels:
        # A refusal ("not held", exit status 1) is an answer; a crash is not.
        if action["done"] is None:
            verdict.inconclusive.append(f"an operator command failed: {action}")
    forced = sum(1 for e in releases if e["done"])
    if outcomes["released-by-operator"] != forced:
        violation(
            f"{forced} forced releases succeeded, but history has "
            f"{outcomes['released-by-operator']} runs released by an operator"
        )
    accepted_cancels = sum(1 for e in cancels if e["done"])
    if outcomes["cancelled"] > accepted_cancels:
        violation(f"{outcomes['cancelled']} runs cancelled, but only {accepted_cancels} asked")

    everything = [e for entries in journals.values() for e in entries]
    kinds = Tally(e["e"] for e in everything)
    refused = Tally(e["by"] for e in everything if e["e"] == "refused")
    late = Tally(bool(e["accepted"]) for e in everything if e["e"] == "late")
    restarts = [e for e in events if e["kind"] == "restart"]
    verdict.counts = {
        "worker processes (at once)": sum(1 for e in events if e["kind"] == "stopped"),
        "claims (tokens handed out)": evidence.last_token,
        "takeovers of an expired lease": sum(
            1 for run in history.values() if run["error"].startswith("lease expired; taken over")
        ),
        "pauses (SIGSTOP) / of a holder past its ttl": f"{len(pauses)} / {len(holder_pauses)}",
        "kills (SIGKILL, then a new worker) / of a holder": (
            f"{len(kills)} / {sum(1 for k in kills if k['token'] is not None)}"
        ),
        "database server restarts (crash, outage > ttl)": len(restarts),
        "runs open across a restart, holder alive (each told LeaseLost)": cut_off,
        "cancels asked / accepted": f"{len(cancels)} / {accepted_cancels}",
        "forced releases asked / done": f"{len(releases)} / {forced}",
        "leases given up by the runner (LeaseLost)": kinds["lost"],
        "fenced writes accepted (ledger entries)": len(ledger),
        "of which fenced before a pause, committed after it": held_across_pause,
        "fenced writes refused by the runner (lease known lost)": refused["runner"],
        "fenced writes refused by the database (stale token)": (refused["database"] + late[False]),
        "late fences by a lost holder the database still accepted": late[True],
        "commits the client never heard back about (database was right)": ambiguous + unheard,
        "runs: succeeded / failed / cancelled / lost / released-by-operator": " / ".join(
            str(outcomes[o])
            for o in ("succeeded", "failed", "cancelled", "lost", "released-by-operator")
        ),
    }
    return verdict
