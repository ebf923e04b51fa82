"""SIGINT and SIGTERM in the ``bgtasks`` command's loops
(django_bgtasks/management/interrupts.py), each in a Python process of its
own: the signals are real, sent to that process, and a handler that
deadlocks its main thread shows as a process that does not end in time,
not as a suite that hangs."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.procs import ROOT

# A process that has not printed its line by then is stuck: each takes well
# under a second when it works.
ENDS_WITHIN = 30.0


def run_script(body: str) -> str:
    script = textwrap.dedent(
        """
        import os, signal, threading, time
        from django_bgtasks.management.interrupts import stop_on_signals
        """
    ) + textwrap.dedent(body)
    try:
        done = subprocess.run(
            [sys.executable, "-c", script],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=ENDS_WITHIN,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(
            f"the process did not end within {ENDS_WITHIN:g} s: a stop that deadlocked"
        ) from exc
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_signal_stops_the_loop_while_its_main_thread_holds_the_flag_s_lock() -> None:
    """Python runs the handler in the main thread, between two of its
    bytecodes: here, with the lock that setting the flag takes held by that
    thread, as a worker's main thread holds its wake-up event's lock each time
    it waits on it or clears it. The flag is still set, once the lock is free."""
    output = run_script(
        """
        class Locked(threading.Event):
            def __init__(self):
                super().__init__()
                self.lock = threading.Lock()

            def set(self):
                with self.lock:
                    super().set()

        stop = Locked()
        with stop_on_signals(stop):
            with stop.lock:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.2)  # the handler has run, in this thread
                print("not yet set:", stop.is_set())
            print("set:", stop.wait(10))
        """
    )
    assert output.splitlines() == ["not yet set: False", "set: True"]


def test_the_first_signal_sets_the_flag_and_the_later_ones_call_again_all_counted() -> None:
    output = run_script(
        """
        stop, count, again = threading.Event(), [0], []
        before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        with stop_on_signals(stop, count, again=again.append):
            os.kill(os.getpid(), signal.SIGTERM)
            print("stop:", stop.wait(10))
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGTERM)
        # The block's end acts on every signal it received first.
        print("count:", count[0], "again:", [signal.Signals(s).name for s in again])
        after = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        print("handlers restored:", after == before)
        relays = [t.name for t in threading.enumerate() if t.name == "bgtasks-signals"]
        print("relay gone:", relays)
        """
    )
    assert output.splitlines() == [
        "stop: True",
        "count: 3 again: ['SIGINT', 'SIGTERM']",
        "handlers restored: True",
        "relay gone: []",
    ]


def test_outside_the_main_thread_the_block_runs_with_the_signals_as_they_were() -> None:
    output = run_script(
        """
        stop, seen = threading.Event(), []
        # (SIG_IGN, not Python's handler, where the parent ignores SIGINT:
        # a background job of a shell without job control, as in CI.)
        before = signal.getsignal(signal.SIGINT)

        def elsewhere():
            with stop_on_signals(stop):
                seen.append(signal.getsignal(signal.SIGINT) is before)

        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join()
        print("unchanged:", seen, "stop:", stop.is_set())
        """
    )
    assert output.splitlines() == ["unchanged: [True] stop: False"]
