"""A workload child process: started with its arguments, watched through its JSON events."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

REPO_ROOT = Path(__file__).resolve().parents[2]
Event = dict[str, Any]
STOP_TIMEOUT = 30.0  # a thread in an uninterruptible write on a busy disk stops late


def _all_threads_stopped(pid: int) -> bool:
    """Every thread of `pid` is in the stopped state (Linux /proc); True where /proc does not
    tell (the signal is then all there is to go by)."""
    tasks = Path(f"/proc/{pid}/task")
    if not tasks.is_dir():
        return True
    try:
        states = [(task / "stat").read_text().rsplit(")", 1)[1].split()[0]
                  for task in tasks.iterdir()]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False  # a thread ended while being looked at: look again
    return bool(states) and all(state in ("T", "t") for state in states)


class ChildRun:
    """One run of ``python -m <module>`` (the workload by default); stderr goes to a file, its
    events also to the same name with the suffix .events, commands go to its stdin."""

    def __init__(self, args: Sequence[str], stderr_path: Path,
                 env: Mapping[str, str] | None = None,
                 module: str = "tests.reliability.workload") -> None:
        child_env = dict(os.environ)
        child_env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO_ROOT), *[p for p in child_env.get("PYTHONPATH", "").split(os.pathsep)
                               if p]])
        child_env.pop("DSTL_KILL_POINT", None)
        child_env.update(env or {})
        self.stderr_path = stderr_path
        self._stderr: IO[bytes] = open(stderr_path, "wb")  # noqa: SIM115 - closed in wait()
        # A session of its own: the kernel continues every stopped member of a process group
        # that becomes orphaned (the shell that started the suite exiting, say), which would
        # wake a paused zombie before the harness resumes it.
        self.process = subprocess.Popen(
            [sys.executable, "-m", module, *args], cwd=REPO_ROOT, env=child_env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True,
            start_new_session=True)
        self.events: list[Event] = []
        self._changed = threading.Condition()
        self._eof = False
        self.timed_out = False
        self._reader = threading.Thread(target=self._read, name="workload-events", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        with open(self.stderr_path.with_suffix(".events"), "w") as kept:  # for post-mortems
            for line in self.process.stdout:
                kept.write(line)
                kept.flush()
                try:
                    event = json.loads(line)
                except ValueError:
                    event = {"event": "garbage", "line": line[:200]}
                with self._changed:
                    self.events.append(event)
                    self._changed.notify_all()
        with self._changed:
            self._eof = True
            self._changed.notify_all()

    def wait_for(self, predicate: Callable[[Event], bool], timeout: float) -> Event | None:
        """The first event (seen so far or coming) that matches; None at exit or timeout."""
        deadline = time.monotonic() + timeout
        index = 0
        with self._changed:
            while True:
                while index < len(self.events):
                    if predicate(self.events[index]):
                        return self.events[index]
                    index += 1
                left = deadline - time.monotonic()
                if self._eof or left <= 0:
                    return None
                self._changed.wait(left)

    def count(self, name: str) -> int:
        with self._changed:
            return sum(1 for event in self.events if event.get("event") == name)

    def first(self, name: str) -> Event | None:
        with self._changed:
            return next((e for e in self.events if e.get("event") == name), None)

    def committed(self) -> list[int]:
        with self._changed:
            return [e["batch"] for e in self.events if e.get("event") == "committed"]

    def send(self, command: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> bool:
        """SIGKILL the child; False when it had already exited."""
        if not self.alive:
            return False
        os.kill(self.process.pid, signal.SIGKILL)
        return True

    def pause(self) -> bool:
        """SIGSTOP the child (a zombie in the making) and wait until every thread of it has
        stopped; False when it had already exited. A thread inside a system call stops only
        when the call returns, so a file it was creating (a lease renewal) may still appear
        after the signal: the child is a zombie once nothing of it runs."""
        if not self.alive:
            return False
        os.kill(self.process.pid, signal.SIGSTOP)
        deadline = time.monotonic() + STOP_TIMEOUT
        while not _all_threads_stopped(self.process.pid):
            if not self.alive:
                return False
            if time.monotonic() > deadline:
                raise RuntimeError(f"child {self.process.pid} did not stop within "
                                   f"{STOP_TIMEOUT:g} s of SIGSTOP")
            time.sleep(0.005)
        return True

    @property
    def stopped(self) -> bool:
        """Every thread of the child is stopped (it was paused and nothing continued it)."""
        return self.alive and _all_threads_stopped(self.process.pid)

    def resume(self) -> None:
        if self.alive:
            os.kill(self.process.pid, signal.SIGCONT)

    def wait(self, timeout: float) -> int:
        """The exit status (negative: killed by that signal); kills the child after timeout."""
        try:
            code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.timed_out = True
            self.kill()
            code = self.process.wait(30)
        self._reader.join(30)
        self._stderr.close()
        return code

    def stderr_tail(self, chars: int = 3000) -> str:
        return self.stderr_path.read_text(errors="replace")[-chars:]
