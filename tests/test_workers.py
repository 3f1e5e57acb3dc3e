"""Worker processes: results come back, a dead worker loses only its task, a stop leaves nothing behind."""

from __future__ import annotations

import multiprocessing
import os
import tempfile
import threading
import time
from functools import partial
from operator import call
from pathlib import Path

import pytest

import etsim.workers as workers
from etsim.errors import SimulationError
from etsim.workers import STOP, BackgroundLost, RemoteTraceback, _remote_error, fork_call, probe_workers, run_in_workers

# Tasks are stdlib callables (picklable by reference; test modules are not importable in workers), run by
# `operator.call`.


def test_every_task_comes_back_with_its_result() -> None:
    tasks = [partial(pow, 2, k) for k in range(20)]
    got: dict[int, int] = {}
    lost = run_in_workers(call, tasks, 2, lambda task, result: got.__setitem__(task.args[1], result))
    assert lost == [] and got == {k: 2**k for k in range(20)}


def test_a_crashing_task_loses_only_itself() -> None:
    tasks = [partial(time.sleep, 0.01) for _ in range(6)]
    tasks[2] = tasks[4] = partial(os._exit, 3)
    done: list[int] = []
    lost = run_in_workers(call, tasks, 2, lambda task, result: done.append(tasks.index(task)))
    assert lost == [tasks[2], tasks[4]]
    assert sorted(done) == [0, 1, 3, 5]


@pytest.mark.parametrize("how", ["STOP", "KeyboardInterrupt"])
def test_a_stop_ends_every_worker_and_runs_their_finalizers(tmp_path: Path, how: str) -> None:
    # The stop lands when the first task ends, a second after the other worker began a task of a minute (a
    # worker stopped before it even started has nothing to finalise; this one has).
    tasks = [partial(time.sleep, 1), partial(time.sleep, 60), partial(time.sleep, 60)]
    threads = set(threading.enumerate())

    def on_result(task: object, result: object) -> None:
        if how == "STOP":
            STOP.set()  # as a SIGINT/SIGTERM handler does
        else:
            raise KeyboardInterrupt  # Ctrl-C landing in this process

    STOP.clear()
    t0 = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_in_workers(call, tasks, 2, on_result, finalizer=partial(tempfile.mkstemp, dir=tmp_path))
    finally:
        STOP.clear()
    assert time.monotonic() - t0 < 30  # the busy worker was terminated, not waited for
    assert multiprocessing.active_children() == []
    assert set(threading.enumerate()) <= threads
    assert len(list(tmp_path.iterdir())) == 2  # each worker's finalizer ran: the idle one's and the busy one's


def test_the_initializer_runs_once_per_worker_before_its_tasks(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    init = partial(tempfile.mkstemp, dir=marks)
    seen: list[list[str]] = []
    # Each task lists the marks directory: the first worker's mark is there before its first task runs.
    tasks = [partial(os.listdir, marks) for _ in range(8)]
    assert run_in_workers(call, tasks, 2, lambda task, result: seen.append(result), initializer=init) == []
    assert all(listing for listing in seen)
    assert len(list(marks.iterdir())) == 2


def test_probe_workers_passes_when_workers_can_start_and_refuses_when_they_die(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert probe_workers() is None  # a real worker ran the no-op
    import etsim.workers

    # A worker that dies before its no-op (what a program read from standard input gets) loses the task.
    monkeypatch.setattr(etsim.workers, "run_in_workers", lambda fn, tasks, *a, **k: list(tasks))
    with pytest.raises(SimulationError, match="worker processes die before running anything"):
        probe_workers()


def test_meanwhile_runs_here_while_workers_work_and_an_error_there_ends_them() -> None:
    got: list[object] = []
    here: list[int] = []
    lost = run_in_workers(
        call,
        [partial(pow, 3, 2)],
        1,
        lambda task, result: got.append(result),
        meanwhile=lambda: here.append(os.getpid()),
    )
    assert lost == [] and got == [9] and here == [os.getpid()]

    def fail() -> None:
        raise ValueError("this process's share failed")

    with pytest.raises(ValueError, match="share failed"):
        run_in_workers(call, [partial(time.sleep, 60)], 1, lambda task, result: None, meanwhile=fail)
    assert multiprocessing.active_children() == []


def test_an_exception_in_a_task_is_raised_here() -> None:
    with pytest.raises(ZeroDivisionError) as caught:
        run_in_workers(call, [partial(divmod, 1, 0)], 1, lambda task, result: None)
    assert "in the worker process" in str(caught.value.__cause__)
    assert multiprocessing.active_children() == []


def test_an_initializer_that_raises_is_raised_here_with_the_workers_traceback() -> None:
    with pytest.raises(FileNotFoundError, match="no-such-dir") as caught:
        init = partial(os.listdir, "/no-such-dir")
        run_in_workers(call, [partial(pow, 2, 1)] * 4, 2, lambda t, r: None, initializer=init)
    assert isinstance(caught.value.__cause__, RemoteTraceback)
    assert "FileNotFoundError" in str(caught.value.__cause__)
    assert multiprocessing.active_children() == []


def test_what_cannot_travel_back_is_a_clear_error() -> None:
    with pytest.raises(SimulationError, match="result cannot be sent back"):
        run_in_workers(call, [threading.Lock], 1, lambda t, r: None)  # a lock does not pickle
    # An exception that does not survive the trip keeps its type name and text.
    exc = _remote_error((b"not a pickle", "CustomError: the disk is full", "Traceback ..."))
    assert isinstance(exc, SimulationError) and str(exc) == "in a worker process: CustomError: the disk is full"
    assert str(exc.__cause__).endswith("Traceback ...")


def test_no_workers_is_refused() -> None:
    with pytest.raises(ValueError, match="workers must be >= 1"):
        run_in_workers(call, [partial(pow, 2, 1)], 0, lambda t, r: None)


@pytest.fixture
def can_fork(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forking allowed whatever this machine's CPUs (pytest's own threads aside)."""
    monkeypatch.setattr(workers, "fork_jobs", lambda cap=None: 2)


def test_fork_call_answers_with_what_the_call_returns_from_memory_it_shares(can_fork: None) -> None:
    shared = list(range(100_000))  # not sent: the copy has it
    job = fork_call(lambda: (sum(shared), os.getpid()))
    assert job is not None
    total, pid = job.result()
    assert total == sum(shared) and pid != os.getpid()
    with pytest.raises(BackgroundLost, match="read already"):
        job.result()


def test_fork_call_says_when_the_call_raised_or_its_process_died(can_fork: None) -> None:
    raised = fork_call(int, "not a number")
    assert raised is not None
    with pytest.raises(BackgroundLost, match="ValueError: invalid literal"):
        raised.result()
    died = fork_call(os._exit, 3)
    assert died is not None
    with pytest.raises(BackgroundLost, match="died before it answered"):
        died.result()
    unpicklable = fork_call(lambda: threading.Lock())
    assert unpicklable is not None
    with pytest.raises(BackgroundLost, match="TypeError"):
        unpicklable.result()


def test_fork_call_declines_where_forking_is_not_safe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers, "fork_jobs", lambda cap=None: 1)
    assert fork_call(sum, [1]) is None


def test_fork_call_declines_when_the_fork_fails_and_a_cut_answer_is_lost_not_raised(
    can_fork: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno
    import signal

    made: list[int] = []
    real_pipe = os.pipe

    def no_fork() -> int:
        raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

    with monkeypatch.context() as m:
        m.setattr(os, "fork", no_fork)
        m.setattr(os, "pipe", lambda: made.extend(real_pipe()) or tuple(made[-2:]))
        assert fork_call(sum, [1]) is None  # (the caller does the work)
    assert len(made) == 2
    for fd in made:  # the pipe is closed
        with pytest.raises(OSError):
            os.fstat(fd)
    job = fork_call(lambda: b"x" * (8 << 20))  # more than a pipe holds: the copy waits to write the rest
    assert job is not None
    time.sleep(0.3)
    os.kill(job._pid, signal.SIGKILL)
    with pytest.raises(BackgroundLost, match="cannot be read"):
        job.result()


def test_a_cancelled_call_leaves_no_process_behind(can_fork: None) -> None:
    job = fork_call(time.sleep, 30)
    assert job is not None
    job.cancel()
    with pytest.raises(ProcessLookupError):
        os.kill(job._pid, 0)
    job.cancel()  # (twice: nothing more to do)


def test_the_copy_ends_with_a_parent_killed_outright(tmp_path: Path) -> None:
    """SIGKILL leaves a parent no chance to cancel its copies: the kernel ends them (Linux's parent-death signal)."""
    import signal
    import subprocess
    import sys

    script = tmp_path / "parent.py"
    script.write_text(
        "import sys, time\n"
        "import etsim.workers as workers\n"
        "workers.fork_jobs = lambda cap=None: 2\n"
        "job = workers.fork_call(time.sleep, 60)\n"
        "print(job._pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    parent.stdout.close()

    def gone() -> bool:
        try:
            with open(f"/proc/{child}/stat") as stat:
                return stat.read().rsplit(")", 1)[1].split()[0] == "Z"  # (ended; its new parent reaps it)
        except FileNotFoundError:
            return True

    deadline = time.monotonic() + 10
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone()


def test_waiting_for_an_answer_can_show_progress(can_fork: None) -> None:
    calls: list[float] = []
    job = fork_call(lambda: time.sleep(0.5) or "done")
    assert job is not None
    assert job.result(lambda: calls.append(time.monotonic())) == "done"
    assert len(calls) >= 2  # (every POLL seconds until the answer came)


def test_the_copy_ignores_what_this_process_ignores(can_fork: None) -> None:
    """Ctrl-C and SIGTERM end the copy at once, unless this process ignores them (a background job, nohup)."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        ignoring = fork_call(lambda: (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)))
        assert ignoring is not None
        assert ignoring.result() == (signal.SIG_IGN, signal.SIG_DFL)
    finally:
        signal.signal(signal.SIGINT, previous)
    default = fork_call(lambda: signal.getsignal(signal.SIGINT))
    assert default is not None and default.result() == signal.SIG_DFL
