"""Drawing on the operator's terminal, for the ``bgtasks`` command.

Tables of styled cells, the ``run`` progress bar, the escaping of control
characters in what task code wrote, and JSON output. Everything is written
through Django's ``OutputWrapper`` and ``Style``, so ``--no-color`` and
captured output work as in any management command, and the app needs no
terminal dependency. Ctrl-C and SIGTERM are :mod:`.interrupts`'.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from typing import Any

from django.core.management.base import OutputWrapper
from django.core.management.color import Style

from django_bgtasks.choices import Outcome, Status
from django_bgtasks.core.states import TaskState
from django_bgtasks.operations import display

# Home the cursor and clear the screen, as watch(1) does. Written only to a
# terminal and never with --no-color, so captured output has no escapes.
CLEAR_SCREEN = "\x1b[H\x1b[2J"
# Without a terminal (logs, pipes), the progress bar writes a line when the
# percentage or the status changes, and otherwise at most this often.
PLAIN_PROGRESS_EVERY = 5.0
# What turns, on a terminal, in place of a bar for a run that reports no
# progress (ASCII, so that any terminal and font draws it).
SPINNER = "|/-\\"

# A table cell: plain text, or text and the style to draw it in.
Cell = str | tuple[str, Callable[[str], str]]


# Errors and values are written by task code, which may echo anything (a file
# name, a remote server's message). Their control characters would be obeyed
# by the operator's terminal (clear the screen, retitle the window), so they
# are printed escaped, as JSON escapes them, which keeps --json valid JSON.
# Newlines and tabs stay: tracebacks are multi-line.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with its control characters (but newlines and tabs) escaped as ``\\uXXXX``."""
    return _CONTROL.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def value_summary(value: Any, limit: int = 60) -> str:
    """The value's other keys (not done/total/progress), compact, for one line."""
    if isinstance(value, dict):
        value = {k: v for k, v in value.items() if k not in ("done", "total", "progress")}
        if not value:
            return ""
    elif value is None:
        return ""
    text = printable(json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str))
    return text if len(text) <= limit else text[: limit - 1] + "…"


def write_json(stdout: OutputWrapper, data: Any) -> None:
    """``data`` as indented JSON, and nothing else (never coloured)."""
    stdout.write(printable(json.dumps(data, indent=2, ensure_ascii=False)))


# --- styled cells and tables -------------------------------------------------------------


def status_cell(state: TaskState, style: Style) -> Cell:
    """The task's status badge: green running, yellow cancel requested, red stale."""
    styles: dict[str, Callable[[str], str]] = {
        Status.RUNNING: style.SUCCESS,
        Status.CANCEL_REQUESTED: style.WARNING,
        Status.STALE: style.ERROR,
    }
    text = display.status_text(state)
    cell_style = styles.get(state.status)
    return (text, cell_style) if cell_style else text


def outcome_cell(outcome: str, style: Style) -> Cell:
    """How a run ended: red failed, lost or timed out, yellow cancelled or released."""
    styles: dict[str, Callable[[str], str]] = {
        Outcome.FAILED: style.ERROR,
        Outcome.LOST: style.ERROR,
        Outcome.TIMED_OUT: style.ERROR,
        Outcome.CANCELLED: style.WARNING,
        Outcome.RELEASED_BY_OPERATOR: style.WARNING,
    }
    cell_style = styles.get(outcome)
    return (outcome, cell_style) if cell_style else outcome


def plain(cell: Cell) -> str:
    """A cell's text, without its style."""
    return cell if isinstance(cell, str) else cell[0]


def styled(cell: Cell, width: int = 0) -> str:
    """A cell padded to ``width``, then styled (so escape codes don't count)."""
    if isinstance(cell, str):
        return cell.ljust(width)
    text, cell_style = cell
    return cell_style(text.ljust(width))


def write_table(
    stdout: OutputWrapper, style: Style, headers: Sequence[str], rows: Sequence[Sequence[Cell]]
) -> None:
    """Columns padded to their widest plain text, then styled: the escape
    codes of a coloured cell must not count towards its width."""
    widths = [len(header) for header in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(plain(cell)))
    heading = "  ".join(header.ljust(width) for header, width in zip(headers, widths, strict=True))
    stdout.write(style.MIGRATE_HEADING(heading.rstrip()))
    for row in rows:
        cells = [styled(cell, width) for cell, width in zip(row, widths, strict=True)]
        stdout.write("  ".join(cells).rstrip())


# --- the progress bar ----------------------------------------------------------------------


class ProgressBar:
    """A progress line for ``run``, written through the command's stdout.

    A run that reports progress gets a bar; one that reports none, a spinner
    and the time it has run (``| running for 4.2 s``), then how it ended
    (``succeeded after 6.0 s``). On a terminal it is redrawn in place
    (``\\r``), the spinner turning at each redraw; otherwise (a log, a pipe,
    a test) it prints a line, without the spinner, when the percentage or the
    status changes, else at most every ``PLAIN_PROGRESS_EVERY`` seconds.
    Django's own output wrapper is enough for this, so the app needs no
    progress-bar dependency.
    """

    WIDTH = 30

    def __init__(self, stdout: OutputWrapper, style: Style) -> None:
        self.stdout = stdout
        self.style = style
        self.tty = stdout.isatty()
        self.drawn = ""
        self.written: tuple[int | None, str] | None = None
        self.written_at = 0.0
        self.turns = 0

    def line(self, state: TaskState) -> str:
        """The bar and the progress label (or the spinner, the status and the
        time), and the value's other keys."""
        progress = state.progress
        if progress is None:
            parts = [self._unmeasured(state)]
        else:
            filled = int(progress * self.WIDTH)
            bar = "[" + "#" * filled + "-" * (self.WIDTH - filled) + "]"
            parts = [bar, display.progress_label(state)]
        extra = value_summary(state.value)
        if extra:
            parts.append(extra)
        return " ".join(parts)

    def _unmeasured(self, state: TaskState) -> str:
        """A run without progress: ``| running for 4.2 s`` while it runs (the
        spinner on a terminal only), ``succeeded after 6.0 s`` once it ended."""
        took = display.seconds(state.duration)
        if state.running:
            spinner = f"{SPINNER[self.turns % len(SPINNER)]} " if self.tty else ""
            return f"{spinner}{state.status} for {took}" if took else f"{spinner}{state.status}"
        ended = state.outcome or display.status_text(state)
        return f"{ended} after {took}" if took else ended

    def draw(self, state: TaskState) -> None:
        """Show ``state``, if it changed what the line says."""
        text = self.line(state)
        if self.tty:
            self.turns += 1  # the next frame of the spinner, at the next redraw
        if text == self.drawn:
            return
        if self.tty:
            # Pad with spaces over a longer previous line, rather than an
            # escape code, so that the output stays plain text.
            self.stdout.write("\r" + text.ljust(len(self.drawn)), ending="")
            self.stdout.flush()
        else:
            progress = state.progress
            said = (None if progress is None else int(progress * 100), str(state.status))
            now = time.monotonic()
            if said == self.written and now - self.written_at < PLAIN_PROGRESS_EVERY:
                return
            self.written, self.written_at = said, now
            self.stdout.write(text)
        self.drawn = text

    def close(self) -> None:
        """End the line on a terminal, so that what follows starts on a new one."""
        if self.tty and self.drawn:
            self.stdout.write("")
