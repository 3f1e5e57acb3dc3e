"""Progress of long jobs, shown on a stream the command line chooses (stderr), never in machine output.

Library code reports stages — ``s = progress.stage("reading ring.et", 1024, "files")``, then ``s.advance()``
per step — and costs an increment and a test per advance when nobody watches (a clock read when someone
does). The command line turns the display on around a command with :func:`shown_on` (not with ``-q``).
Nothing is shown for a job's first :data:`DELAY` seconds, so short commands print exactly what they printed
before; after that:

- on a terminal, one line is redrawn at most every :data:`INTERVAL` seconds and erased at the end;
- elsewhere (a log file, CI), a plain line every :data:`PLAIN_INTERVAL` seconds.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TextIO

__all__ = ["DELAY", "INTERVAL", "PLAIN_INTERVAL", "Display", "Stage", "clear", "shown_on", "stage"]

#: Seconds a job runs before any progress is shown.
DELAY = 2.0
#: Seconds between redraws on a terminal.
INTERVAL = 0.5
#: Seconds between lines when the stream is not a terminal.
PLAIN_INTERVAL = 10.0


class Display:
    """Draws progress texts on *stream*, throttled (see the module docstring).

    Args:
        stream: where to draw (``sys.stderr``).
        delay: seconds before anything is shown (default :data:`DELAY`).
    """

    def __init__(self, stream: TextIO, *, delay: float | None = None) -> None:
        self.stream = stream
        self.start = time.perf_counter()
        self.delay = DELAY if delay is None else delay
        isatty = getattr(stream, "isatty", None)
        self.terminal = bool(isatty and isatty())
        self._next = self.start + self.delay
        self._drawn = False

    def due(self) -> bool:
        """Whether a new text would be drawn now (cheap: one clock read)."""
        return time.perf_counter() >= self._next

    def show(self, text: str) -> None:
        """Draw *text* if it is time to."""
        now = time.perf_counter()
        if now < self._next:
            return
        elapsed = f"{now - self.start:.0f} s"
        if self.terminal:
            line = f"{text}, {elapsed}"[:110]
            self.stream.write(f"\r{line:<110}")
            self._next = now + INTERVAL
            self._drawn = True
        else:
            self.stream.write(f"etsim: {text}, {elapsed}\n")
            self._next = now + PLAIN_INTERVAL
        self.stream.flush()

    def clear(self) -> None:
        """Erase a drawn line (terminal only), so the next output starts on a clean line."""
        if self._drawn:
            self.stream.write("\r" + " " * 110 + "\r")
            self.stream.flush()
            self._drawn = False


_display: ContextVar[Display | None] = ContextVar("etsim_progress", default=None)


def current() -> Display | None:
    """The display progress goes to, or None."""
    return _display.get()


@contextmanager
def shown_on(stream: TextIO | None, *, delay: float | None = None) -> Iterator[Display | None]:
    """Show the progress of everything run inside on *stream* (None: nothing, even if an outer display is on)."""
    if stream is None:
        token = _display.set(None)
        try:
            yield None
        finally:
            _display.reset(token)
        return
    display = Display(stream, delay=delay)
    token = _display.set(display)
    try:
        yield display
    finally:
        display.clear()
        _display.reset(token)


def clear() -> None:
    """Erase the current progress line, if any (before printing a message)."""
    display = _display.get()
    if display is not None:
        display.clear()


class Stage:
    """One stage of a job: ``label`` with ``done`` of ``total`` steps (see :func:`stage`)."""

    __slots__ = ("display", "done", "label", "total", "unit")

    def __init__(self, label: str, total: int | None, unit: str) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.done = 0
        self.display = _display.get()

    def advance(self, steps: int = 1) -> None:
        """*steps* more steps are done."""
        self.done += steps
        display = self.display
        if display is not None and display.due():
            of = f"/{self.total:,}" if self.total is not None else ""
            display.show(f"{self.label}: {self.done:,}{of} {self.unit}")


def stage(label: str, total: int | None = None, unit: str = "") -> Stage:
    """A stage of *total* steps (None: unknown) called *label*, reported as it advances."""
    return Stage(label, total, unit)
