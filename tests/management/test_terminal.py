"""Drawing on the operator's terminal (management/terminal.py), without a
database: the ``run`` progress bar redrawn in place and the spinner of a
run without progress, on a terminal; control characters escaped; a
table's columns padded by their text, not their colours' escape codes."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
from io import StringIO
from typing import Any

from django.core.management.base import OutputWrapper
from django.core.management.color import color_style, no_style

from django_bgtasks.core.leases import TaskState
from django_bgtasks.management.terminal import ProgressBar, printable, write_json, write_table


class Terminal(StringIO):
    def isatty(self) -> bool:
        return True


def state(value: Any) -> TaskState:
    now = dt.datetime.now(dt.UTC)
    return TaskState("t", value, True, "w", 1, 30.0, now, None, now, False, "", "", False, 0.1)


def test_the_progress_bar_redraws_in_place_on_a_terminal() -> None:
    screen = Terminal()
    bar = ProgressBar(OutputWrapper(screen), no_style())
    bar.draw(state({"done": 1, "total": 4, "phase": "a long phase name"}))
    bar.draw(state({"done": 1, "total": 4, "phase": "a long phase name"}))  # unchanged: nothing
    bar.draw(state({"done": 2, "total": 4}))
    bar.close()

    first = "[" + "#" * 7 + "-" * 23 + '] 25% (1/4) {"phase":"a long phase name"}'
    second = "[" + "#" * 15 + "-" * 15 + "] 50% (2/4)"
    # Each redraw returns to the line's start and covers the longer line before it.
    assert screen.getvalue() == f"\r{first}\r{second.ljust(len(first))}\n"
    assert "\x1b" not in screen.getvalue()


def test_a_run_without_progress_turns_a_spinner_and_counts_its_time_on_a_terminal() -> None:
    screen = Terminal()
    bar = ProgressBar(OutputWrapper(screen), no_style())
    for age in (0.1, 0.3, 0.5, 0.7, 0.9):
        bar.draw(dataclasses.replace(state(None), heartbeat_age=age))
    running = state(None)
    ended = dataclasses.replace(
        running,
        running=False,
        finished_at=running.started_at + dt.timedelta(seconds=1),
        outcome="succeeded",
    )
    bar.draw(ended)
    bar.draw(ended)  # unchanged: nothing
    bar.close()

    frames = [
        f"{spin} running for {age} s"
        for spin, age in zip("|/-\\|", ("0.1", "0.3", "0.5", "0.7", "0.9"), strict=True)
    ]
    assert screen.getvalue() == "".join(f"\r{frame}" for frame in frames) + (
        "\rsucceeded after 1.0 s\n"
    )


def test_control_characters_are_escaped_but_newlines_and_tabs_stay() -> None:
    # Clear the screen, ring the bell, a C1 control (CSI), DEL: escaped, as JSON escapes them.
    assert printable("a\x1b[2Jb\x07c\td\ne\x9bf\x7f") == (
        "a\\u001b[2Jb\\u0007c\td\ne\\u009bf\\u007f"
    )
    assert printable("tracebacks stay\n\tmulti-line: é") == "tracebacks stay\n\tmulti-line: é"
    out = StringIO()
    data = {"error": "\x1b]0;a new title\x07", "csi": "\x9b31m", "text": "é"}
    write_json(OutputWrapper(out), data)
    written = out.getvalue()
    assert not [char for char in written if ord(char) < 32 and char not in "\n"]
    assert "\x9b" not in written and "é" in written
    assert json.loads(written) == data  # still JSON, of the same values


def test_a_tables_columns_are_padded_by_their_text_not_their_colours_escape_codes() -> None:
    style = color_style(force_color=True)
    out = StringIO()
    rows: list[list[Any]] = [[("failed", style.ERROR), "a"], ["succeeded", "b"]]
    write_table(OutputWrapper(out), style, ("OUTCOME", "X"), rows)
    lines = out.getvalue().splitlines()
    assert "\x1b[" in lines[1]  # the cell is coloured, padding and all
    plain = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in lines]
    assert plain == ["OUTCOME    X", "failed     a", "succeeded  b"]
    out = StringIO()
    write_table(OutputWrapper(out), no_style(), ("OUTCOME", "X"), rows[1:])
    assert out.getvalue() == "OUTCOME    X\nsucceeded  b\n"
