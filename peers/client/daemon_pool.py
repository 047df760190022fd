"""A thread pool whose threads are daemons. `concurrent.futures.ThreadPoolExecutor` joins its threads when the
interpreter exits, so one request stuck on a server that stopped answering would keep the process alive until its
timeout (an hour by default). A run that gives up on such a server (`server.stall_watch`) must be able to
leave those requests behind: here they die with the process."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

_STOP = None


class DaemonPool:
    def __init__(self, max_workers: int, name: str = "daemon") -> None:
        if max_workers < 1:
            raise ValueError(f"max_workers must be >= 1, got {max_workers}")
        self._work: queue.SimpleQueue = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._worker, name=f"{name}_{i}", daemon=True) for i in range(max_workers)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        future: Future = Future()
        self._work.put((future, fn, args))
        return future

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        """Stop taking work. cancel_futures: drop what has not started. wait: join the threads (only when every
        request is known to end: after a stall, never)."""
        if cancel_futures:
            while True:
                try:
                    item = self._work.get_nowait()
                except queue.Empty:
                    break
                if item is not _STOP:
                    item[0].cancel()
        for _ in self._threads:
            self._work.put(_STOP)
        if wait:
            for thread in self._threads:
                thread.join()

    def _worker(self) -> None:
        while True:
            item = self._work.get()
            if item is _STOP:
                return
            future, fn, args = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # handed to whoever waits on the future
                future.set_exception(exc)
