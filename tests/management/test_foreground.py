"""``bgtasks run`` (management/foreground.py), on the surfaces' engines: a
run started here and followed in the foreground, its progress bar or the
time it has run, its ttl and arguments, what it refuses with nothing
written, how it ended; and in a real process, Ctrl-C as a cancel request
and a second interrupt as giving its lease up."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest
from django.core.management import CommandError, call_command

from django_bgtasks import RunningLease, background_task
from django_bgtasks.models import BackgroundTask
from tests.dbtools import rows
from tests.management.test_bgtasks import bgtasks, communicate_or_kill, manage, read_until

objects = BackgroundTask.objects


def test_run_runs_in_the_foreground_with_a_progress_bar(site_alias: str) -> None:
    out = bgtasks("run", "surface-quick")

    assert "Running 'surface-quick' here as " in out
    assert "[" + "#" * 30 + "] 100% (3/3)" in out
    assert "'surface-quick' succeeded (token 1) in " in out
    assert 'result: {"counted": 3}' in out
    state = objects.get_state("surface-quick")
    assert (state.running, state.outcome, state.ttl) == (False, "succeeded", 30.0)


def test_run_of_a_task_without_progress_says_how_long_it_has_run(site_alias: str) -> None:
    @background_task(name="surface-ticks", ttl=30)
    def ticks(lease: RunningLease) -> str:
        time.sleep(0.7)
        return "ticked"

    out = bgtasks("run", "surface-ticks")

    # Not a bar of question marks, nor "idle" once it ended: the time it has run,
    # then how it ended (in a pipe: without the spinner, a line per status).
    assert "?" not in out and "idle" not in out, out
    lines = out.splitlines()
    assert re.fullmatch(r"running for \d+\.\d s", lines[1]), out
    assert re.fullmatch(r"succeeded after \d+\.\d s", lines[2]), out
    assert lines[3].startswith("'surface-ticks' succeeded (token 1) in ")


def test_run_takes_a_ttl(site_alias: str) -> None:
    bgtasks("run", "surface-quick", "--ttl", "7")
    assert objects.get_state("surface-quick").ttl == 7.0


def test_run_passes_its_arguments_to_the_task(site_alias: str) -> None:
    # surface-sum(lease, numbers), surface-quick(lease, total=3): tests/testapp
    assert "result: 6" in bgtasks("run", "surface-sum", "--args", "[[1, 2, 3]]")
    out = bgtasks("run", "surface-quick", "--kwargs", '{"total": 2}')
    assert "] 100% (2/2)" in out and 'result: {"counted": 2}' in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nope"], "No background task is registered as 'nope'"),
        (["surface-quick", "--ttl", "0"], "ttl must be a positive"),
        (["surface-quick", "--ttl", "1e9"], "at most"),
        # The arguments, as `bgtasks request` checks them: surface-quick(lease,
        # total=3), surface-sum(lease, numbers), tests/testapp
        (
            ["surface-quick", "--kwargs", '{"bogus": 1}'],
            "task 'surface-quick' can't take these arguments: "
            "got an unexpected keyword argument 'bogus'",
        ),
        (["surface-quick", "--args", "[1, 2]"], "too many positional arguments"),
        (["surface-sum"], "missing a required argument: 'numbers'"),
        (
            ["surface-sum", "--args", '{"numbers": [1]}'],
            "argument --args: args must be a list or tuple (a JSON array), not an object",
        ),
        (
            ["surface-sum", "--kwargs", "[[1]]"],
            "argument --kwargs: kwargs must be a dict (a JSON object), not an array",
        ),
        (["surface-sum", "--kwargs", "{nope"], "argument --kwargs: kwargs is not valid JSON: "),
    ],
)
def test_run_refuses_bad_input_and_writes_nothing(
    site_alias: str, args: list[str], message: str
) -> None:
    with pytest.raises(CommandError, match=re.escape(message)):
        bgtasks("run", *args)
    assert rows(site_alias) == []


def test_run_checks_arguments_handed_over_past_argparse(site_alias: str) -> None:
    with pytest.raises(CommandError, match=re.escape("args must be a list or tuple")):
        call_command("bgtasks", "run", "surface-sum", task_args="[1]")
    with pytest.raises(CommandError, match=re.escape("kwargs must be a dict")):
        call_command("bgtasks", "run", "surface-sum", task_kwargs=[1])
    assert rows(site_alias) == []


def test_run_refuses_a_held_task_and_names_the_holder(site_alias: str) -> None:
    objects.try_claim("surface-quick", "worker-1", ttl=30)
    before = rows(site_alias)
    with pytest.raises(CommandError, match=r"already running on worker-1 \(token 1\)"):
        bgtasks("run", "surface-quick")
    assert rows(site_alias) == before


def test_run_fails_when_the_task_fails(site_alias: str) -> None:
    with pytest.raises(CommandError, match=r"'surface-fails' failed \(token 1\): RuntimeError"):
        bgtasks("run", "surface-fails")
    state = objects.get_state("surface-fails")
    assert state.outcome == "failed" and "disk on fire" in state.error


def test_ctrl_c_during_run_cancels_the_task(site_alias: str) -> None:
    process = manage(site_alias, "run", "surface-slow")
    try:
        read_until(process, "Running 'surface-slow'")
        read_until(process, "(1/240)")
        read_until(process, "/240)")  # the progress bar is moving (by coalesced steps)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()

    assert "Asked the task to stop" in out
    assert process.returncode == 1
    assert "CommandError: 'surface-slow' was cancelled (token 1)" in err
    state = objects.get_state("surface-slow")
    assert (state.running, state.outcome) == (False, "cancelled")
    assert state.value["done"] < 40


@pytest.mark.parametrize("together", [False, True], ids=["one-after-the-other", "together"])
def test_a_second_interrupt_abandons_the_run_and_releases_its_lease(
    site_alias: str, together: bool
) -> None:
    # A step longer than the test: the task cannot act on the cancel that the
    # first interrupt asks for, so only giving its lease up ends the run.
    process = manage(site_alias, "run", "surface-slow", "--kwargs", '{"pause": 120}')
    try:
        read_until(process, "Running 'surface-slow'")
        if together:
            # Both delivered while the process is stopped. (Two pending
            # SIGINTs would merge into one, so the second is a SIGTERM.)
            # Whether the command acts on the first before the second comes
            # in is up to its threads; either way the run is abandoned.
            os.kill(process.pid, signal.SIGSTOP)
            process.send_signal(signal.SIGINT)
            process.send_signal(signal.SIGTERM)
            time.sleep(0.1)
            os.kill(process.pid, signal.SIGCONT)
        else:
            process.send_signal(signal.SIGINT)
            read_until(process, "Asked the task to stop")
            process.send_signal(signal.SIGINT)
        _out, err = communicate_or_kill(process, timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()

    assert process.returncode == 1, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert "CommandError: Abandoned 'surface-slow' (token 1); its lease is released." in err
    state = objects.get_state("surface-slow")
    assert (state.running, state.outcome, state.token) == (False, "cancelled", 1)
    assert "abandoned" in state.error
