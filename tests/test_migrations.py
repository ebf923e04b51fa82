"""The migrations (django_bgtasks/migrations/): the SQL a released migration
ran, each engine's entry in db/<engine>/schema.py, never changes. What the
entries set up is tested by what it does in tests/db/test_schema.py (every
engine) and tests/db/<engine>/test_schema.py."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path

import pytest

import django_bgtasks
from django_bgtasks.db.driver import Steps
from django_bgtasks.db.mysql.schema import SCHEMA as MYSQL_SCHEMA
from django_bgtasks.db.postgresql.schema import SCHEMA as POSTGRESQL_SCHEMA
from django_bgtasks.db.sqlite.schema import SCHEMA as SQLITE_SCHEMA

# --- the SQL of a released migration never changes (db/<engine>/schema.py) -------------

# Each engine's schema entry, by the first 16 hex digits of the sha256 of its
# text (released_sql()), as its migration was released. A database migrated
# with an entry has what it said: an edit would give a database migrated
# later something else. A new migration's entries are pinned here as it is
# written; a pin is never changed.
RELEASED_SQL = {
    "postgresql": {
        "0002_lease_storage": "918ebff4a61f87f4",
        "0003_postgresql_takeover_trigger": "1e887bccf5ab973c",
        "0004_workers": "4f9d2bfc6b8ae9b4",
        "0005_results": "424f83de567a4c59",
        "0008_postgresql_change_notifications": "cd0c99b3642148a3",
        "0009_postgresql_no_pattern_index": "8894047983fcce64",
        "0010_postgresql_queue_notifications": "def247a281b97546",
        "0013_flow_limits": "b08fa46983901db1",
        "0015_pause": "37772104e1edf3a8",
        "0017_postgresql_partial_queue_indexes": "4ece1fe4eac1c6d3",
        "0019_postgresql_claim_by_queue": "ce786887b4a9afc6",
        "0021_queue_list_indexes": "cb6be53eee3b4b82",
        "0022_flow_slots_made_once": "b0af7fabebd2098d",
        "0023_postgresql_finished_by_status": "55b7417a348db418",
        "0025_postgresql_running_by_seq": "25f1c962ac5b5b52",
        "0027_finished_by_time": "29d93a3e87a14528",
        "0028_fair_shares": "de16e723b21550af",
    },
    "mysql": {
        "0006_mysql_storage": "5bc8bf5bef5c0f28",
        "0012_mysql_queue": "78614fb018b9eed1",
        "0013_flow_limits": "c5d3981ea3b7e431",
        "0015_pause:paused_queue": "ac539044938f2d3e",
        "0021_queue_list_indexes": "2cecacad02ce3f95",
        "0027_finished_by_time": "55abfa350287501a",
        "0028_fair_shares": "8a7ef628e0943164",
    },
    "sqlite": {
        "0002_lease_storage": "318eba2776172f02",
        "0004_workers": "254cbb2d1b8ccb8c",
        "0005_results": "61b634327c8a99c2",
        "0005_results:restore_0004": "9ce71086c60841f0",
        "0013_flow_limits": "a575cf68952382cc",
        "0015_pause:restore_0005": "678d3bac38ffc2cb",
        "0015_pause": "61b634327c8a99c2",  # 0005's trigger again, word for word
        "0018_sqlite_claim_index": "605e6055e53b1a43",
        "0020_sqlite_flow_slot_take": "76bba89b13869e4f",
        "0021_queue_list_indexes": "8cd8166d3b35b779",
        "0022_flow_slots_made_once": "19f94670be70450b",
        "0027_finished_by_time": "5d4dfa49f1cbc0b0",
        "0028_fair_shares": "775d043637b62a69",
    },
}
SCHEMAS = {"postgresql": POSTGRESQL_SCHEMA, "mysql": MYSQL_SCHEMA, "sqlite": SQLITE_SCHEMA}


def released_sql(steps: Steps) -> str:
    """What pins an entry: its statements forwards and backwards, in order,
    and its query of the pattern indexes."""
    parts = [*steps.forwards, "-- backwards", *steps.backwards, "-- pattern indexes"]
    text = "\n".join([*parts, steps.pattern_indexes])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def edited(pinned: dict[str, str], schema: Mapping[str, Steps]) -> list[str]:
    """The entries of ``schema`` whose text is no longer the one ``pinned``."""
    return sorted(
        step for step in pinned if step not in schema or pinned[step] != released_sql(schema[step])
    )


@pytest.mark.parametrize("vendor", sorted(SCHEMAS))
def test_the_sql_of_a_released_migration_is_never_edited(vendor: str) -> None:
    schema, pinned = SCHEMAS[vendor], RELEASED_SQL[vendor]
    changed = edited(pinned, schema)
    assert changed == [], (
        f"a released migration's SQL changed: add a new migration instead "
        f"({vendor}: {changed}, in django_bgtasks/db/{vendor}/schema.py)"
    )
    unpinned = sorted(set(schema) - set(pinned))
    assert unpinned == [], (
        f"{vendor}'s schema entries {unpinned} are not pinned: add their hashes to "
        "RELEASED_SQL as their migration is written"
    )
    migrations = {
        path.stem for path in (Path(django_bgtasks.__file__).parent / "migrations").glob("0*.py")
    }
    strays = sorted(step for step in schema if step.partition(":")[0] not in migrations)
    assert strays == [], f"{vendor}'s schema entries of no migration: {strays}"


def test_an_edit_of_a_released_entry_is_caught() -> None:
    entry = SQLITE_SCHEMA["0018_sqlite_claim_index"]
    respaced = Steps(forwards=[entry.forwards[0] + " "], backwards=entry.backwards)
    assert edited(RELEASED_SQL["sqlite"], {**SQLITE_SCHEMA}) == []
    assert edited(
        RELEASED_SQL["sqlite"], {**SQLITE_SCHEMA, "0018_sqlite_claim_index": respaced}
    ) == ["0018_sqlite_claim_index"]
    # An entry taken away is an edit too.
    assert edited(RELEASED_SQL["sqlite"], {}) == sorted(RELEASED_SQL["sqlite"])
