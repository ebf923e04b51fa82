"""One database at one CONN_MAX_AGE, for benchmarks/tasks_throughput.py
(whose docstring says what is measured and how): the rounds, alternating
between the backends, and the table of their medians."""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

THIS = str(Path(__file__).resolve().with_name("tasks_throughput.py"))
Processes = list[subprocess.Popen[bytes]]


def run(args: argparse.Namespace, dsn: str, conn_max_age: int) -> None:
    """Measures, prints the table, and writes the rounds to ``args.out``."""
    import tasks_throughput

    tasks_throughput.setup_django(dsn, conn_max_age)
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    import tasks_peers

    logs = Path(tempfile.mkdtemp(prefix="bgtasks-bench-logs-"))
    print(f"\n=== {header(conn_max_age)}; workers' stderr in {logs}")
    refused = {alias: why(alias) for alias in args.backends}
    aliases = [alias for alias in args.backends if not refused[alias]]
    os.environ["BENCH_BACKENDS"] = ",".join(aliases)  # for the workers
    variants = [
        (alias, threads)
        for alias in aliases
        for threads in (args.concurrency if tasks_peers.BY_ALIAS[alias].threads else [1])
    ]
    rounds: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    bench = Bench(dsn, conn_max_age, args, logs)
    if "bgtasks_limits" in aliases:
        first_keys()
    for number in range(args.rounds):
        turn = number % max(1, len(variants))
        order = variants[turn:] + variants[:turn]
        for alias in dict.fromkeys(alias for alias, _ in order):
            rounds[alias]["enqueue"].append(bench.enqueue_rate(alias))
        for alias, threads in order:
            startup, samples = bench.latency(alias, threads)
            rounds[f"{alias} {threads}"]["startup"].append(startup)
            rounds[f"{alias} {threads}"]["latency"].extend(samples)
        for workers in args.workers:
            for alias, threads in order:
                rate, bulk = bench.drain(alias, workers, threads)
                rounds[f"{alias} {threads}"][f"drain {workers}"].append(rate)
                if bulk is not None:
                    rounds[alias]["bulk"].append(bulk)
        print(f"round {number + 1} of {args.rounds} done", flush=True)
    table(args, variants, rounds, refused)
    spend_table(bench.spent)
    if args.out:
        spent = {" ".join(map(str, key)): value for key, value in bench.spent.items()}
        Path(args.out).write_text(
            json.dumps({"rounds": rounds, "refused": refused, "spent": spent})
        )


def first_keys() -> None:
    """Makes the slots of the limited tasks' keys before the first round, as
    their first enqueue does once in a key's life (a site's keys keep their
    slots), and prints what that first enqueue took."""
    import throughput_tasks
    from django.db import connection
    from tasks_peers import clear

    clear(["bgtasks_limits"])
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM django_bgtasks_flowslot")
    noop, stamp = throughput_tasks.NOOP["bgtasks_limits"], throughput_tasks.STAMP["bgtasks_limits"]
    for task, args in ((noop, []), (stamp, ["-"])):
        started = time.perf_counter()
        task.enqueue(*args)
        took = time.perf_counter() - started
        print(f"a key's first enqueue, its {2 * throughput_tasks.LIMIT:,} slots made: "
              f"{took * 1000:,.0f} ms ({task.name})")  # fmt: skip
    clear(["bgtasks_limits"])


def spend_table(spent: dict[tuple[str, int, int], list[dict[str, float]]]) -> None:
    """Where each drain's time went (Spend.per_task), medians of the rounds."""
    from tasks_peers import BY_ALIAS

    print("\nwhere a drain's time goes, a task (medians): CPU ms of the workers, of the"
          " database server (the machine's rest) and of this process; the cores kept"
          " busy; PostgreSQL's commits and WAL bytes")  # fmt: skip
    print(f"{'backend':<16}{'workers':>8}{'threads':>8}{'workers ms':>11}{'db ms':>8}"
          f"{'bench ms':>9}{'cores':>7}{'commits':>9}{'WAL B':>8}")  # fmt: skip
    for (alias, workers, threads), drains in spent.items():

        def mid(name: str, drains: list[dict[str, float]] = drains) -> float:
            return statistics.median(drain[name] for drain in drains)

        print(f"{BY_ALIAS[alias].label:<16}{workers:>8}{threads:>8}{mid('workers_ms'):>11.3f}"
              f"{mid('database_ms'):>8.3f}{mid('bench_ms'):>9.3f}{mid('cores_busy'):>7.2f}"
              f"{mid('commits'):>9.2f}{mid('wal_bytes'):>8.0f}")  # fmt: skip


def header(conn_max_age: int) -> str:
    """The database, the versions and the machine, in one line."""
    from importlib.metadata import version

    import django
    from django.db import connection
    from tasks_peers import PEERS

    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("SELECT 'SQLite ' || sqlite_version()")
        else:
            cursor.execute("SELECT version()")
        server = cursor.fetchone()[0].split(" on ")[0].split(",")[0]
    dists = dict.fromkeys(p.dist for p in PEERS if p.installed())
    peers = ", ".join(f"{dist} {version(dist)}" for dist in dists)
    load = os.getloadavg()[0]
    return (
        f"{server}, CONN_MAX_AGE={conn_max_age}; Python {sys.version.split()[0]}, "
        f"Django {django.get_version()}; {peers}; {os.cpu_count()} CPUs, load {load:.1f}"
    )


def why(alias: str) -> str:
    """Why this backend can't run here ('' when it can): not installed, or the
    ids of the errors its system checks raise on this database."""
    from django.core import checks
    from tasks_peers import BY_ALIAS

    if not BY_ALIAS[alias].installed():
        return "n/a: not installed"
    try:
        from django.tasks import task_backends
    except ImportError:
        from django_tasks import task_backends  # type: ignore[no-redef]
    backend = task_backends[BY_ALIAS[alias].tasks_alias]
    errors = [m for m in backend.check() if m.level >= checks.ERROR]
    return f"n/a: not supported ({', '.join(str(m.id) for m in errors)})" if errors else ""


def alive(processes: Processes) -> None:
    """Raises if a worker has ended (its stderr is in the logs' folder)."""
    ended = [process.args for process in processes if process.poll() is not None]
    if ended:
        raise RuntimeError(f"a worker ended before it was stopped: {ended[0]}")


class Bench:
    """Starts and stops the workers, and times each measurement."""

    def __init__(self, dsn: str, conn_max_age: int, args: argparse.Namespace, logs: Path):
        self.dsn, self.conn_max_age, self.args, self.logs = dsn, conn_max_age, args, logs
        self.startup: dict[tuple[str, int], float] = {}  # the last, by (alias, threads)
        # Where each drain's time went (Spend.per_task), by (alias, workers, threads).
        self.spent: dict[tuple[str, int, int], list[dict[str, float]]] = defaultdict(list)

    def start(self, alias: str, workers: int, threads: int) -> Processes:
        """``workers`` worker processes of this backend, each in a session of
        its own (so a supervisor's children are stopped with it)."""
        from tasks_peers import worker_commands

        env = {**os.environ, "BENCH_DJQ": f"{workers},{threads}"}
        base = [sys.executable, THIS, "manage", self.dsn, str(self.conn_max_age)]
        with open(self.logs / f"{alias}.log", "ab") as log:
            return [
                subprocess.Popen(
                    [*base, *command],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                    start_new_session=True,
                )
                for command in worker_commands(alias, workers, threads)
            ]

    def stop(self, processes: Processes) -> None:
        """SIGTERM to each one's process group, SIGKILL after 30 s."""
        for process in processes:
            os.killpg(process.pid, signal.SIGTERM)
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    def enqueue_rate(self, alias: str) -> float:
        """Single ``enqueue()`` calls a second, each its own commit."""
        import throughput_tasks
        from tasks_peers import clear

        clear([alias])
        task = throughput_tasks.NOOP[alias]
        started = time.perf_counter()
        for _ in range(self.args.enqueues):
            task.enqueue()
        took = time.perf_counter() - started
        clear([alias])
        return self.args.enqueues / took

    def latency(self, alias: str, threads: int) -> tuple[float, list[float]]:
        """(start-up s, enqueue-to-start latencies s) with one idle worker."""
        import throughput_tasks
        from tasks_peers import clear

        clear([alias])
        stamp = throughput_tasks.STAMP[alias]
        folder = Path(tempfile.mkdtemp(prefix="bgtasks-bench-stamps-"))
        stamp.enqueue(str(folder / "first"))
        before = time.time()
        processes = self.start(alias, 1, threads)
        try:
            startup = stamped(folder / "first", processes) - before
            time.sleep(0.5)
            samples = []
            for number in range(self.args.samples):
                time.sleep(random.uniform(0.05, 0.15))
                path = folder / str(number)
                before = time.time()
                stamp.enqueue(str(path))
                samples.append(stamped(path, processes) - before)
        finally:
            self.stop(processes)
            shutil.rmtree(folder)
        self.startup[alias, threads] = startup
        return startup, samples

    def drain(self, alias: str, workers: int, threads: int) -> tuple[float, float | None]:
        """(tasks/s from the enqueue's commit to the last finish, the bulk
        enqueue's tasks/s or None)."""
        import throughput_tasks
        from django.db import transaction
        from tasks_peers import bulk_enqueue, clear, counts, last_finish

        clear([alias])
        if self.args.vacuum:
            vacuum(alias)
        tasks, task, bulk = self.args.tasks, throughput_tasks.NOOP[alias], bulk_enqueue(alias)
        processes = self.start(alias, workers, threads)
        try:
            # Long enough for all of them to be up and idle: --settle, or
            # more on a slow machine, where one start-up took longer.
            time.sleep(max(self.args.settle, workers * self.startup.get((alias, threads), 0)))
            started = time.perf_counter()
            with transaction.atomic():
                if bulk is None:
                    for _ in range(tasks):
                        task.enqueue()
                else:
                    bulk(task, [([], {})] * tasks)
                analyzing = time.perf_counter()
                if self.args.analyze:
                    analyze(alias)
                analyzed = time.perf_counter()
            # (The bulk enqueue's time is its statement and its commit, not the ANALYZE.)
            enqueued = time.perf_counter() - started - (analyzed - analyzing)
            committed = time.time()
            spent, counted = Spend.now(processes), database_counts()
            wait_finished(alias, tasks, processes)
            spent = Spend.now(processes).since(spent)
            took = last_finish(alias) - committed
        finally:
            self.stop(processes)
        # After the stop: a server process counts what its session did when it
        # ends (and at most once a second before).
        spent.commits, spent.wal = (a - b for a, b in zip(database_counts(), counted, strict=True))
        failed = counts(alias)[1]
        assert failed == 0, f"{alias}: {failed} tasks failed (see {self.logs})"
        self.spent[(alias, workers, threads)].append(spent.per_task(tasks))
        return tasks / took, (tasks / enqueued if bulk else None)


class Spend:
    """What a drain cost, between two snapshots (:meth:`now`): the CPU time of
    the worker processes (their trees), of this process, and of the whole
    machine (so of the database server, the rest on a quiet machine), and on
    PostgreSQL the commits and WAL bytes its statistics count (this
    process's polls of the count, one each 0.5 s, among them)."""

    def __init__(self, wall: float, workers: float, bench: float, machine: float) -> None:
        self.wall, self.workers, self.bench, self.machine = wall, workers, bench, machine
        self.commits = self.wal = 0.0  # (PostgreSQL's, set by the drain)

    @classmethod
    def now(cls, processes: Processes) -> Spend:
        import psutil

        def cpu(process: psutil.Process) -> float:
            try:
                times = process.cpu_times()
            except psutil.Error:  # gone
                return 0.0
            return times.user + times.system

        workers = 0.0
        for popen in processes:
            try:
                tree = [psutil.Process(popen.pid)]
                tree += tree[0].children(recursive=True)
            except psutil.Error:
                continue
            workers += sum(cpu(process) for process in tree)
        machine = psutil.cpu_times()
        busy = sum(machine) - machine.idle - getattr(machine, "iowait", 0.0)
        return cls(time.perf_counter(), workers, cpu(psutil.Process()), busy)

    def since(self, before: Spend) -> Spend:
        return Spend(*(getattr(self, name) - getattr(before, name) for name in
                       ("wall", "workers", "bench", "machine")))  # fmt: skip

    def per_task(self, tasks: int) -> dict[str, float]:
        """ms of CPU a task (workers, database and the rest, this process),
        the machine's cores kept busy, commits and WAL bytes a task."""
        return {
            "workers_ms": self.workers / tasks * 1000,
            "database_ms": (self.machine - self.workers - self.bench) / tasks * 1000,
            "bench_ms": self.bench / tasks * 1000,
            "cores_busy": self.machine / self.wall,
            "commits": self.commits / tasks,
            "wal_bytes": self.wal / tasks,
        }


def database_counts() -> tuple[float, float]:
    """PostgreSQL's count of commits in this database, and of WAL bytes;
    zeros elsewhere."""
    from django.db import connection

    if connection.vendor != "postgresql":
        return 0.0, 0.0
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute(
            "SELECT xact_commit, (SELECT wal_bytes FROM pg_stat_wal) FROM pg_stat_database"
            " WHERE datname = current_database()"
        )
        commits, wal = cursor.fetchone()
    return float(commits), float(wal)


def analyze(alias: str) -> None:
    """PostgreSQL's statistics of ``alias``'s tables, committed with the
    drain's tasks (ANALYZE runs inside a transaction): the planner sees the
    queue as it is, not as the last round's DELETE left it."""
    _each_table(alias, "ANALYZE")


def vacuum(alias: str) -> None:
    """``VACUUM ANALYZE`` of ``alias``'s tables, outside any transaction: the
    dead rows of the rounds before are gone, as autovacuum leaves them on a
    server that runs it (the CI machine's PostgreSQL runs with
    ``autovacuum = off``)."""
    _each_table(alias, "VACUUM ANALYZE")


def _each_table(alias: str, command: str) -> None:
    """``command`` on each of ``alias``'s tables, on PostgreSQL only."""
    from django.db import connection
    from tasks_peers import BY_ALIAS

    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        for table in (*BY_ALIAS[alias].tables, *BY_ALIAS[alias].kept):
            cursor.execute(f"{command} {connection.ops.quote_name(table)}")


def stamped(path: Path, processes: Processes, timeout: float = 120) -> float:
    """The time a stamp task wrote to ``path``, once it is there."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no task wrote {path} in {timeout:.0f} s")
        alive(processes)
        time.sleep(0.002)
    return float(path.read_text())


def wait_finished(alias: str, tasks: int, processes: Processes, stall: float = 120) -> None:
    """Returns once ``tasks`` tasks are finished; raises after ``stall``
    seconds without progress."""
    from tasks_peers import counts

    done, changed = 0, time.monotonic()
    while done < tasks:
        # Not more often: the count reads the whole table (19 ms a count at
        # 20,000 rows on PostgreSQL), CPU the workers and their database
        # share; the drain's end is read from the rows, not from this loop.
        time.sleep(0.5)
        alive(processes)
        now = counts(alias)[0]
        if now != done:
            done, changed = now, time.monotonic()
        elif time.monotonic() - changed > stall:
            raise TimeoutError(f"{alias}: {done} of {tasks} finished, none for {stall:.0f} s")


def table(args: argparse.Namespace, variants: list[tuple[str, int]],
          rounds: dict[str, dict[str, list[float]]], refused: dict[str, str]) -> None:  # fmt: skip
    """The medians, each backend a line, and ours over the best peer."""
    from tasks_peers import BY_ALIAS

    def median(key: str, figure: str) -> float | None:
        values = rounds.get(key, {}).get(figure)
        return statistics.median(values) if values else None

    def cell(value: float | None, width: int, form: str = ",.0f") -> str:
        return f"{value:>{width}{form}}" if value is not None else f"{'n/a':>{width}}"

    drains = [f"drain {workers}" for workers in args.workers]
    print(f"\n{args.tasks} no-op tasks per drain, {args.rounds} alternating rounds, medians")
    print(f"{'backend':<16}{'threads':>8}" + "".join(f"{d + 'w t/s':>15}" for d in drains)
          + f"{'start-up s':>12}{'p50 ms':>9}{'p99 ms':>9}")  # fmt: skip
    for alias, threads in variants:
        key = f"{alias} {threads}"
        latency = sorted(rounds[key]["latency"])
        p50 = statistics.median(latency) * 1000 if latency else None
        p99 = latency[min(len(latency) - 1, int(len(latency) * 0.99))] * 1000 if latency else None
        print(f"{BY_ALIAS[alias].label:<16}{threads:>8}"
              + "".join(cell(median(key, d), 15) for d in drains)
              + cell(median(key, "startup"), 12, ".2f") + cell(p50, 9, ".1f")
              + cell(p99, 9, ".1f"))  # fmt: skip
    for alias, reason in refused.items():
        if reason:
            print(f"{BY_ALIAS[alias].label:<16}  {reason}")
    print(f"\n{'enqueue, tasks/s':<24}{'single':>10}{'bulk':>10}")
    for alias in dict.fromkeys(alias for alias, _ in variants):
        print(f"{BY_ALIAS[alias].label:<24}" + cell(median(alias, "enqueue"), 10)
              + cell(median(alias, "bulk"), 10))  # fmt: skip
    for threads in args.concurrency:
        plain, limited = f"bgtasks {threads}", f"bgtasks_limits {threads}"
        for figure in drains:
            if median(plain, figure) and median(limited, figure):
                print(f"{figure}, {threads} threads: limits declared ÷ none = "
                      f"{median(limited, figure) / median(plain, figure):.2f}x")  # fmt: skip
    for figure in ["enqueue", "bulk"]:
        if median("bgtasks", figure) and median("bgtasks_limits", figure):
            print(
                f"{figure}: limits declared ÷ none = "
                f"{median('bgtasks_limits', figure) / median('bgtasks', figure):.2f}x"
            )
    ours = [key for key in rounds if key.startswith("bgtasks ")]
    theirs = [key for key in rounds if not key.startswith("bgtasks")]
    for figure in [*drains, "enqueue", "bulk"]:
        best = {
            side: max(((median(k, figure) or 0, k) for k in keys), default=(0, ""))
            for side, keys in (("ours", ours), ("theirs", theirs))
        }
        if best["ours"][0] and best["theirs"][0]:
            print(f"{figure}: ours ({best['ours'][1]}) ÷ the best peer ({best['theirs'][1]}) = "
                  f"{best['ours'][0] / best['theirs'][0]:.2f}x")  # fmt: skip
    each = {
        key: {
            name: [round(value, 2) for value in values]
            for name, values in figures.items()
            if name != "latency"
        }
        for key, figures in rounds.items()
    }
    print("each round:", json.dumps(each))
