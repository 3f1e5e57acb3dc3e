"""Worker processes for parallel runs (sweeps, tuning) that can be stopped at any moment.

:func:`run_in_workers` farms tasks out to fresh worker processes, each with a pipe of its own. Not
:class:`concurrent.futures.ProcessPoolExecutor`: its workers share one result queue, and a worker ended
while writing to it leaves a half-written result that the pool's manager thread waits on forever, so
the stopped process hangs at exit. With a pipe per worker, a torn answer is end-of-file on a pipe
nobody reads again.

Workers start from a ``forkserver`` (a clean, single-threaded process that imported the given modules
once), so they never inherit a parent's threads or locks, and the task function, initialiser and
arguments must be picklable (module-level functions, plain data).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import pickle
import signal
import threading
import traceback
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_ready
from multiprocessing.process import BaseProcess
from multiprocessing.reduction import ForkingPickler
from types import FrameType
from typing import Any, Generic, TypeVar

from etsim.errors import Interrupted, SimulationError
from etsim.registry import PLUGINS_ENV

__all__ = [
    "POLL",
    "STOP",
    "Background",
    "BackgroundLost",
    "RemoteTraceback",
    "check_stop",
    "default_jobs",
    "fork_call",
    "fork_jobs",
    "probe_workers",
    "run_in_workers",
    "stop_on_signals",
]

T = TypeVar("T")
R = TypeVar("R")

#: Set by a signal handler to stop :func:`run_in_workers` at its next check (every :data:`POLL` seconds).
#: A handler that raised instead could interrupt this process between two steps that must go together
#: (writing a result file and counting it, say); the flag lets the caller choose where a stop may land.
STOP = threading.Event()
#: Seconds between two checks of :data:`STOP`.
POLL = 0.1


def check_stop() -> None:
    """Raise KeyboardInterrupt if :data:`STOP` is set."""
    if STOP.is_set():
        raise KeyboardInterrupt


@contextlib.contextmanager
def stop_on_signals(*, immediate: bool, again: str) -> Iterator[None]:
    """Ctrl-C and SIGTERM stop a long job (a sweep, a search): workers are ended, what finished is kept.

    - The handlers (installed even where SIGINT was ignored: a shell's background job) set :data:`STOP`, which
      the pools check at safe points; with *immediate* (no pool) they raise KeyboardInterrupt at once too.
    - A second signal ends the process at once, saying *again* (what continues the job); workers end themselves.
    - The interrupt leaves the block as :class:`~etsim.errors.Interrupted` (the signal's number). Off the main
      thread (no handlers there) the block runs as it is.
    """
    STOP.clear()
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        if STOP.is_set():
            os.write(2, f"etsim: stopped again, ending now ({again})\n".encode())
            os._exit(128 + signum)
        received.append(signum)
        STOP.set()
        if immediate:
            raise KeyboardInterrupt

    received: list[int] = []
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(received[0] if received else signal.SIGINT) from None
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        STOP.clear()


def default_jobs() -> int:
    """The CPUs this process may use."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def fork_jobs(cap: int | None = None) -> int:
    """Processes a fork-based parallel step uses by default: this process's CPUs (at most *cap*), or 1.

    1 when ``fork`` is unavailable, or when this process runs other threads: forking it could deadlock the
    child (a thread may hold a lock), and such a process (a sweep worker, say) is one of several already.
    """
    if "fork" not in multiprocessing.get_all_start_methods() or threading.active_count() > 1:
        return 1
    jobs = default_jobs()
    return jobs if cap is None else min(jobs, cap)


def _context(start: str, preload: Sequence[str]) -> Any:
    methods = multiprocessing.get_all_start_methods()
    if start not in ("forkserver", "fork"):
        raise ValueError(f"start={start!r}: expected 'forkserver' or 'fork'")
    if start not in methods:  # pragma: no cover - not POSIX
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context(start)
    if start == "forkserver":
        ctx.set_forkserver_preload(list(preload))  # used when the server starts (once per process)
    return ctx


_IDLE = object()


@dataclass
class _Worker:
    """One worker process, this process's end of its pipe, and the task it is running."""

    process: BaseProcess
    conn: Connection
    task: Any = _IDLE


@dataclass(frozen=True)
class _Job:
    """What a worker runs, sent once when it starts."""

    function: Callable[[Any], Any]
    initializer: Callable[..., None] | None
    initargs: tuple[Any, ...]
    finalizer: Callable[[], None] | None
    environment: tuple[tuple[str, str | None], ...] = ()  # (PASSED_ENVIRONMENT's values when the run began)


#: Environment variables a worker takes from the process that runs it (not from the worker server, which
#: started earlier): the user's choices made since, such as the plug-ins allowed.
PASSED_ENVIRONMENT = (PLUGINS_ENV,)


def _start(ctx: Any, job: _Job, lifeline: Connection, alive: Connection) -> _Worker:
    conn, child = ctx.Pipe()
    # A forked worker inherits every descriptor, `alive` included: it closes that copy first thing, or its
    # lifeline would never read end-of-file. Other start methods pass only what the arguments name.
    inherited = alive if ctx.get_start_method() == "fork" else None
    # Not a daemon: a task may start processes of its own (writing a synthesised family in parallel).
    process = ctx.Process(target=_serve, args=(child, lifeline, job, inherited), name="etsim-worker")
    process.start()
    child.close()  # the worker holds the only other end: its death is end-of-file here
    return _Worker(process, conn)


def _end(workers: Sequence[_Worker]) -> None:
    """End every worker: idle ones are told to stop, busy ones are terminated (SIGTERM, then SIGKILL)."""
    for worker in workers:
        if not worker.process.is_alive():
            continue
        if worker.task is _IDLE:
            with contextlib.suppress(OSError):
                worker.conn.send(None)  # tasks travel as 1-tuples: None means "end now"
        else:
            worker.process.terminate()
    for worker in workers:
        worker.process.join(timeout=5)
        if worker.process.is_alive():  # pragma: no cover - a worker stuck where SIGTERM cannot reach it
            worker.process.kill()
            worker.process.join()
        worker.conn.close()


def run_in_workers(
    function: Callable[[T], R],
    tasks: Sequence[T],
    workers: int,
    on_result: Callable[[T, R], None],
    *,
    initializer: Callable[..., None] | None = None,
    initargs: tuple[Any, ...] = (),
    finalizer: Callable[[], None] | None = None,
    preload: Sequence[str] = (),
    start: str = "forkserver",
    meanwhile: Callable[[], None] | None = None,
) -> list[T]:
    """Run ``function(task)`` for every task on up to *workers* fresh processes; return the tasks whose worker died.

    - ``on_result(task, result)`` runs in this process as each task finishes (in completion order).
    - A worker that dies (a crash, the OOM killer) loses only its own task; a new worker takes its place
      while tasks wait. Nothing is retried here: the caller decides what a lost task means.
    - :data:`STOP` (checked every :data:`POLL` s) ends the run with KeyboardInterrupt; a KeyboardInterrupt
      raised in this process ends it too. Either way every worker is gone before this returns or raises:
      busy ones are terminated, idle ones told to stop.
    - Workers ignore SIGINT (Ctrl-C belongs to this process) and end themselves when this process dies
      (SIGKILL included: they watch a pipe whose only write end this process holds).
    - ``initializer(*initargs)`` runs once in each worker before its first task; ``finalizer()`` runs as
      it ends, whether told to, terminated or orphaned (multiprocessing's children skip ``atexit``).
    - An exception raised by *function* or *initializer* ends the run: it is raised here, once every worker
      is gone, with the worker's traceback as its cause (:class:`RemoteTraceback`); one that cannot
      travel becomes a :class:`~etsim.errors.SimulationError` with its text.
    - *preload*: modules the worker server imports once, so that workers start warm.
    - *start*: ``"forkserver"`` (the default: clean workers; the function, initialiser and their
      arguments are pickled) or ``"fork"`` (workers are copies of this process: a closure or a global
      set just before the call reaches them as it is; use it from single-threaded code only).
    - ``meanwhile()`` runs in this process once every worker has its first task (this process's own
      share of the work, say); results are collected after it returns.
    """
    if workers < 1 and tasks:
        raise ValueError(f"run_in_workers: workers must be >= 1, got {workers}")
    ctx = _context(start, preload)
    if ctx.get_start_method() == "forkserver" and tasks:
        _start_server()
    environment = tuple((name, os.environ.get(name)) for name in PASSED_ENVIRONMENT)
    job = _Job(function, initializer, initargs, finalizer, environment)
    lifeline, alive = ctx.Pipe(duplex=False)  # workers get the read end; only this process holds `alive`
    pool = _Pool(ctx, job, lifeline, alive, tasks)
    try:
        pool.start(workers)
        if meanwhile is not None:
            meanwhile()
        while pool.collect(on_result):
            pass
    finally:
        _end(pool.workers)
        alive.close()
        lifeline.close()
    return pool.lost


class _Pool(Generic[T]):
    """The workers of one :func:`run_in_workers` call, the tasks still queued and the tasks lost with a worker."""

    def __init__(self, ctx: Any, job: _Job, lifeline: Connection, alive: Connection, tasks: Sequence[T]) -> None:
        self.ctx, self.job, self.lifeline, self.alive = ctx, job, lifeline, alive
        self.queue: deque[T] = deque(tasks)
        self.workers: list[_Worker] = []
        self.lost: list[T] = []

    def start(self, workers: int) -> None:
        """Start up to *workers* workers, one per queued task, then give each its first task."""
        for _ in range(min(workers, len(self.queue))):  # all started before any task is sent: they start together
            self.workers.append(self.start_worker())
        for worker in self.workers:
            self.hand_out(worker)

    def hand_out(self, worker: _Worker) -> None:
        """Send *worker* the next queued task, or mark it idle when none is left."""
        worker.task = self.queue.popleft() if self.queue else _IDLE
        if worker.task is not _IDLE:
            # A worker that died since its last answer: `collect` reads its end-of-file, loses the task.
            with contextlib.suppress(OSError):
                worker.conn.send((worker.task,))

    def start_worker(self) -> _Worker:
        """A new worker process, started with signals held."""
        try:
            with _signals_held():
                return _start(self.ctx, self.job, self.lifeline, self.alive)
        except (EOFError, OSError) as exc:  # the worker server is gone: killed with this process's group?
            check_stop()
            raise SimulationError(f"cannot start a worker process: {type(exc).__name__}: {exc}") from None

    def collect(self, on_result: Callable[[T, Any], None]) -> bool:
        """Wait up to :data:`POLL` seconds and handle every answer or death that came; False once all are idle.

        A worker that answered gets its next task before *on_result* runs; one that died loses its task and
        is replaced while tasks wait.

        Raises:
            KeyboardInterrupt: :data:`STOP` is set.
            BaseException: the exception a task raised in its worker (:func:`_remote_error`).
        """
        busy = [worker for worker in self.workers if worker.task is not _IDLE]
        if not busy:
            return False
        check_stop()
        ready = set(wait_ready([w.conn for w in busy] + [w.process.sentinel for w in busy], timeout=POLL))
        for worker in busy:
            if worker.conn not in ready and worker.process.sentinel not in ready:
                continue
            task = worker.task
            try:
                if worker.conn not in ready and not worker.conn.poll(0):
                    # Dead, yet its pipe is still open (a process it started may hold it): nothing will come.
                    raise EOFError
                ok, result = _receive(worker.conn)
            except (EOFError, OSError):  # died before or while answering
                self.lost.append(task)
                worker.task = _IDLE
                self.workers.remove(worker)
                _end([worker])
                if self.queue:
                    self.workers.append(self.start_worker())
                    self.hand_out(self.workers[-1])
                continue
            if not ok:
                raise _remote_error(result)
            self.hand_out(worker)  # first, so the worker computes while this process handles the result
            on_result(task, result)
        return True


def _receive(conn: Connection) -> Any:
    """A worker's answer; end-of-file or OSError if it died; a SimulationError if it cannot be unpickled."""
    payload = conn.recv_bytes()
    try:
        return pickle.loads(payload)
    except Exception as exc:
        raise SimulationError(f"a worker's answer cannot be read here: {type(exc).__name__}: {exc}") from None


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM off in this thread while a worker or the worker server starts.

    A process started meanwhile inherits the hold, so a signal cannot kill it half-way through its start-up
    (workers lift it once their handlers are in place, :func:`_serve`). Here, a signal that came meanwhile
    is delivered on leaving: a KeyboardInterrupt between a worker's fork and its entry in the pool would
    leave it unknown, never ended nor reaped.
    """
    held = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _start_server() -> None:
    """Start the worker server (once per process) with Ctrl-C and SIGTERM held off.

    It shares this process's terminal and process group: a Ctrl-C (or a ``kill`` of the group) while it
    imports the preloaded modules would kill it with a traceback, and this process's next worker would
    fail to start. Started under :func:`_signals_held`, it imports in peace, then ignores SIGINT (which
    drops a held one); a held SIGTERM never reaches it, and it ends with this process anyway. The
    resource tracker starts first: starting it lifts the hold.
    """
    from multiprocessing import forkserver, resource_tracker

    resource_tracker.ensure_running()
    with _signals_held():
        forkserver.ensure_running()


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a worker (the ``__cause__`` of the one raised here)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def _failure(exc: BaseException) -> tuple[bytes | None, str, str]:
    """What a worker sends back for *exc*: the pickled exception if it pickles, and its text either way."""
    try:
        pickled: bytes | None = pickle.dumps(exc)
    except Exception:
        pickled = None
    text = "".join(traceback.format_exception(exc))
    return pickled, f"{type(exc).__name__}: {exc}", text


def _remote_error(failure: tuple[bytes | None, str, str]) -> BaseException:
    """The exception to raise here for a worker's :func:`_failure` (its own, when it survives the trip)."""
    pickled, summary, text = failure
    exc: BaseException | None = None
    if pickled is not None:
        with contextlib.suppress(Exception):
            exc = pickle.loads(pickled)
    if not isinstance(exc, BaseException):
        exc = SimulationError(f"in a worker process: {summary}")
    exc.__cause__ = RemoteTraceback(f"\n---- in the worker process ----\n{text}")
    return exc


def _nothing(task: object) -> object:
    return task


def probe_workers(preload: Sequence[str] = ()) -> None:
    """Raise :class:`~etsim.errors.SimulationError` if a fresh worker cannot even run a no-op.

    Then every task would "die", whatever it is: a program read from standard input, for one, cannot
    start workers.
    """
    if run_in_workers(_nothing, [None], 1, lambda task, result: None, preload=preload):
        raise SimulationError(
            "worker processes die before running anything (see the messages above; a program read from "
            "standard input cannot start workers): run with --jobs 1 to work in this process"
        )


def _serve(conn: Connection, lifeline: Connection, job: _Job, inherited: Connection | None) -> None:
    """A worker's life: run each task received on *conn* and send back its result, until told to end.

    Answers are ``(True, result)`` or ``(False, failure)`` (:func:`_failure`). An initialiser that
    raises is the answer to the first task, then the worker ends. A parent that is gone (end-of-file, a
    reset or broken pipe) ends the worker quietly.
    """
    if inherited is not None:
        inherited.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})  # held by _signals_held
    threading.Thread(target=_watch, args=(lifeline, job.finalizer), name="etsim-lifeline", daemon=True).start()
    for name, value in job.environment:
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    try:
        broken: BaseException | None = None
        if job.initializer is not None:
            try:
                job.initializer(*job.initargs)
            except Exception as exc:
                broken = exc
        with conn:
            while True:
                try:
                    message = conn.recv()
                except (EOFError, OSError):
                    return
                if message is None:
                    return
                if broken is not None:
                    answer: tuple[bool, Any] = (False, _failure(broken))
                else:
                    try:
                        answer = (True, job.function(message[0]))
                    except Exception as exc:
                        answer = (False, _failure(exc))
                try:
                    payload = ForkingPickler.dumps(answer)
                except Exception as exc:  # a result that does not pickle
                    failure = _failure(SimulationError(f"a worker's result cannot be sent back: {exc!r}"))
                    payload = ForkingPickler.dumps((False, failure))
                try:
                    conn.send_bytes(payload)
                except OSError:  # the parent is gone
                    return
                if broken is not None:
                    return
    finally:
        if job.finalizer is not None:
            job.finalizer()


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def _watch(lifeline: Connection, finalizer: Callable[[], None] | None) -> None:
    with contextlib.suppress(EOFError, OSError):
        lifeline.recv_bytes()  # blocks until the parent process closes its end, or dies
    if finalizer is not None:
        finalizer()
    os._exit(1)


class BackgroundLost(Exception):
    """A call run by :func:`fork_call` gave no answer: its process died, or the call raised (the text says which)."""


class Background:
    """A call running in a forked copy of this process (:func:`fork_call`); :meth:`result` waits for its answer."""

    def __init__(self, pid: int, fd: int) -> None:
        self._pid, self._fd = pid, fd
        self._done = False

    def result(self, waiting: Callable[[], None] | None = None) -> Any:
        """The call's return value, once it is there (it is read once: call this once).

        *waiting* is called every :data:`POLL` seconds until the answer starts to arrive (to show progress).

        Raises:
            BackgroundLost: the copy died before it answered (or while it did), or the call raised there.
        """
        if self._done:
            raise BackgroundLost("the answer was read already")
        self._done = True
        try:
            with os.fdopen(self._fd, "rb") as pipe:
                if waiting is not None:
                    while not wait_ready([self._fd], timeout=POLL):
                        waiting()
                payload = pipe.read()
        except BaseException:
            with contextlib.suppress(OSError):
                os.kill(self._pid, signal.SIGKILL)
            raise
        finally:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self._pid, 0)
        if not payload:
            raise BackgroundLost("the process died before it answered")
        try:
            status, value = pickle.loads(payload)
        except Exception as exc:  # (cut short: the copy died while it wrote)
            raise BackgroundLost(f"the answer cannot be read: {type(exc).__name__}: {exc}") from None
        if status != "ok":
            raise BackgroundLost(value)
        return value

    def cancel(self) -> None:
        """End the copy now, if its answer was not read (nothing is left behind: it is killed and reaped)."""
        if self._done:
            return
        self._done = True
        with contextlib.suppress(OSError):
            os.kill(self._pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self._pid, 0)
        with contextlib.suppress(OSError):
            os.close(self._fd)


def fork_call(function: Callable[..., R], *args: Any) -> Background | None:
    """Start ``function(*args)`` in a forked copy of this process; None where forking is not safe or fails.

    - The copy shares this process's memory as it is (copy on write): *function* and *args* are not pickled,
      only the return value is, sent back through a pipe.
    - The copy ends with ``os._exit`` once it has answered: no ``atexit`` handler, no buffer of this process is
      flushed twice. Ctrl-C and SIGTERM end it at once (their default actions, set before they can arrive, unless
      this process ignores them), so it never unwinds into this process's own code; this process then finds no
      answer. On Linux the copy also
      ends when this process does, however it ends.
    - None also when the fork itself fails (no memory, a limit on processes): the caller does the work.
    - Worth it for calls of a second or so, on a machine with a CPU to spare: a fork of a large process costs
      tens of milliseconds.
    """
    if fork_jobs() <= 1:
        return None
    try:
        read_end, write_end = os.pipe()
    except OSError:
        return None
    parent = os.getpid()
    with _signals_held():  # (delivered on leaving: in the copy, to the default actions set here)
        try:
            pid = os.fork()
        except OSError:
            os.close(read_end)
            os.close(write_end)
            return None
        if pid == 0:  # pragma: no cover - the copy (its coverage is not collected)
            for signum in (signal.SIGINT, signal.SIGTERM):
                if signal.getsignal(signum) is not signal.SIG_IGN:  # (what this process ignores, the copy does too)
                    signal.signal(signum, signal.SIG_DFL)
            _end_with(parent)
    if pid == 0:  # pragma: no cover - the copy
        try:
            os.close(read_end)
            try:
                payload = pickle.dumps(("ok", function(*args)), protocol=pickle.HIGHEST_PROTOCOL)
            except BaseException as exc:
                payload = pickle.dumps(("error", f"{type(exc).__name__}: {exc}"))
            with os.fdopen(write_end, "wb") as pipe:
                pipe.write(payload)
        finally:
            os._exit(0)
    os.close(write_end)
    return Background(pid, read_end)


def _end_with(parent: int) -> None:  # pragma: no cover - runs in the copy
    """Have the kernel end this process when *parent* ends (Linux's ``PR_SET_PDEATHSIG``); if it has, end now.

    A parent killed outright (SIGKILL, or SIGTERM where no handler is installed) cannot cancel its copies; without
    this they would run on, orphaned, to the end of their call.
    """
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # (not Linux)
        return
    if os.getppid() != parent:
        os._exit(0)
