"""Work run in a child process that can be paused: a backfill's scratch work stops outright (SIGSTOP) while today's
load runs, and goes on (SIGCONT) when it has ended. A thread's lower priority or fewer cores leave it running on an
idle core, where its DuckDB scans still take the memory bandwidth today's load reads with; a stopped process takes
nothing. Linux only (fork, and the child dies with its parent); elsewhere the caller runs the work in a thread."""

from __future__ import annotations

import contextlib
import ctypes
import os
import pickle
import select
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from multiprocessing import Pipe
from multiprocessing.connection import Connection
from typing import Callable, Iterator, TypeVar

T = TypeVar("T")

AVAILABLE = sys.platform.startswith("linux") and hasattr(os, "fork")
PR_SET_PDEATHSIG = 1
# How long a forked child may take to say it is ready (set to die with its parent).
READY_S = 60.0
# How long a child that answered may take to exit before it is killed.
REAP_S = 5.0
# Set in the child: what `relayed` sends its lines through.
_TO_PARENT: Connection | None = None


class ChildDied(RuntimeError):
    """The child ended without an answer (killed, out of memory, crashed)."""


@dataclass
class Pauses:
    """What was given up to today's load, added up across calls: how long the work stood paused, how often it was
    asked to give way, and how long it ran on fewer cores (past the pause's cap, or `capacity.yield_cores`)."""

    paused_s: float = 0.0
    times: int = 0
    yielded_s: float = 0.0


def relayed(log: Callable[[str], None] | None) -> Callable[[str], None] | None:
    """`log`, callable from work run in a child: there a line goes to the parent, which logs it (a child must not
    write to the parent's Dagster instance: its storage connections were not made for two processes)."""
    if log is None:
        return None

    def send(line: str) -> None:
        if _TO_PARENT is not None:
            _TO_PARENT.send(("log", line))
        else:
            log(line)
    return send


def _portable(exc: BaseException) -> BaseException:
    """The child's exception as the parent can rebuild it, with the child's traceback as a note."""
    exc.add_note("raised in the backfill's scratch process:\n" + "".join(traceback.format_tb(exc.__traceback__)))
    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001 - an exception whose constructor pickle cannot call again
        out = RuntimeError(f"{type(exc).__name__}: {exc}")
        for note in getattr(exc, "__notes__", []):
            out.add_note(note)
        return out


def _child(work: Callable[[], T], out: Connection, parent: int, nice: int) -> None:
    """In the forked child: die with the parent, lower the priority, run, answer, exit without the parent's
    atexit handlers or buffers."""
    global _TO_PARENT
    code = 0
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the line above
            os._exit(1)
        if nice > 0:
            os.setpriority(os.PRIO_PROCESS, 0, min(os.getpriority(os.PRIO_PROCESS, 0) + nice, 19))
        _TO_PARENT = out
        out.send(("ready", None))  # from here on it dies with the parent: it may be paused
        try:
            answer: tuple[str, object] = ("ok", work())
        except BaseException as exc:  # noqa: BLE001 - carried to the parent, raised there
            answer = ("err", _portable(exc))
        try:
            out.send(answer)
        except Exception as exc:  # noqa: BLE001 - a result pickle refuses
            out.send(("err", RuntimeError(f"the scratch process's result could not be sent: {exc}")))
    except BaseException:  # noqa: BLE001 - whatever happens, the child never returns into the parent's code
        code = 1
    finally:
        os._exit(code)


def run(work: Callable[[], T], busy: Callable[[], bool], *, nice: int = 0, max_pause_s: float = 60.0,
        watch_s: float = 0.25, log: Callable[[str], None] | None = None,
        on_yield: Callable[[int, bool], None] | None = None, pauses: Pauses | None = None,
        say: Callable[[str], None] | None = None, cores: int | None = None) -> T:
    """`work()` in a forked child, `nice` steps lower in CPU priority, paused while `busy()` (checked every
    `watch_s`), for at most `max_pause_s` at a time: past that it goes on, and `on_yield(pid, True)` is called
    (at every watch while `busy()` holds; `on_yield(pid, False)` once it no longer does). Lines the work logs
    through `relayed(...)` reach `log` here. `say` is told when a pause begins and how it ended (`cores`: what
    `on_yield` keeps the work to past the cap, None if it keeps it to nothing). Returns the work's result, or raises
    its exception."""
    done = pauses or Pauses()
    reader, writer = Pipe(duplex=False)
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        reader.close()
        _child(work, writer, parent, nice)
    writer.close()
    paused_since: float | None = None
    yielded_since: float | None = None
    capped = in_period = False
    reaped = answered = False

    def resume(why: str | None = None) -> None:
        nonlocal paused_since
        if paused_since is not None:
            os.kill(pid, signal.SIGCONT)
            stood = time.monotonic() - paused_since
            done.paused_s += stood
            paused_since = None
            if why is not None and say is not None:
                say(f"the scratch work goes on after {stood:.1f} s paused: {why}")

    def unyield() -> None:
        nonlocal yielded_since
        if yielded_since is not None:
            done.yielded_s += time.monotonic() - yielded_since
            yielded_since = None
            if on_yield is not None:
                on_yield(pid, False)

    def receive() -> tuple[object] | None:
        """One message: a log line is logged (None), an answer returned in a 1-tuple, an error raised."""
        nonlocal reaped, answered
        try:
            kind, value = reader.recv()
        except EOFError:
            if not reaped:
                _, status = os.waitpid(pid, 0)
                reaped = True
                raise ChildDied(f"the backfill's scratch process ended without an answer ({_status(status)})")
            raise ChildDied("the backfill's scratch process ended without an answer")
        if kind == "log":
            if log is not None:
                log(str(value))
            return None
        answered = True
        if kind == "err":
            raise value  # type: ignore[misc]
        return (value,)

    try:
        # Not paused before it is set to die with the parent: a stopped orphan would never end.
        if not reader.poll(READY_S):
            raise ChildDied(f"the backfill's scratch process did not start within {READY_S:.0f} s")
        try:
            reader.recv()  # ("ready", None)
        except EOFError:
            _, status = os.waitpid(pid, 0)
            reaped = True
            raise ChildDied(f"the backfill's scratch process ended before it started ({_status(status)})") from None
        while True:
            try:
                now_busy = busy()
            except Exception:  # noqa: BLE001 - the run storage unreadable for a moment: keep what was decided
                now_busy = paused_since is not None or yielded_since is not None
            now = time.monotonic()
            if not now_busy:
                resume("today's load has ended")
                unyield()
                capped = in_period = False
            elif paused_since is None and not capped:
                os.kill(pid, signal.SIGSTOP)
                paused_since = now
                if not in_period:
                    in_period, done.times = True, done.times + 1
                    if say is not None:
                        say(f"today's load is queued or running: the scratch work stands paused until it ends (at "
                            f"most {max_pause_s:g} s)")
            elif paused_since is not None and now - paused_since >= max_pause_s:
                resume("today's load is still queued or running; it runs " +
                       (f"on {cores} core(s) until that ends" if cores is not None else "beside it"))
                capped = True
            if capped and now_busy and on_yield is not None:
                yielded_since = yielded_since or now
                on_yield(pid, True)
            if reader.poll(watch_s):
                resume()  # a message half written by a paused child would never end
                answer = receive()
                if answer is not None:
                    return answer[0]  # type: ignore[return-value]
                continue
            # Ended without an answer, and its pipe still open (a process forked meanwhile holds its end)?
            ended, status = os.waitpid(pid, os.WNOHANG)
            if ended:
                reaped, paused_since = True, None
                while reader.poll(0):  # what it sent before it ended
                    answer = receive()
                    if answer is not None:
                        return answer[0]  # type: ignore[return-value]
                raise ChildDied(f"the backfill's scratch process ended without an answer ({_status(status)})")
    finally:
        reader.close()
        unyield()
        if not reaped:
            # Answered: the child is exiting. Interrupted before (the run terminated): it must not go on working,
            # paused or not.
            with contextlib.suppress(ProcessLookupError, ChildProcessError):
                if not answered:
                    os.kill(pid, signal.SIGKILL)
                resume()
                _reap(pid)


def _reap(pid: int) -> None:
    """Wait for the child briefly (it is exiting after its answer), then kill it. Its exit is waited on through a
    pidfd where Linux has one, so the parent goes on the moment it ends (a 10 ms poll added ms to every phase)."""
    deadline = time.monotonic() + REAP_S
    with _pidfd(pid) as fd:
        while time.monotonic() < deadline:
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done:
                return
            if fd is None:
                time.sleep(0.01)
            else:
                select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)


@contextlib.contextmanager
def _pidfd(pid: int) -> Iterator[int | None]:
    """A descriptor that becomes readable when `pid` ends, or None (no pidfd_open, or the child already reaped)."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        yield None
        return
    try:
        yield fd
    finally:
        os.close(fd)


def _status(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit code {os.WEXITSTATUS(status)}"
