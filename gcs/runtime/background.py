"""``Background``: work that runs in a thread of its own while its caller stays responsive, and hands its result
(or its error) back to the caller's thread. The transformers runner streams a generation this way, and the app
runs every long request this way, so that a client that leaves can stop it.

>>> Background(lambda stop: 6 * 7, name="answer").result()
42
>>> Background(lambda stop: 1 / 0, name="fails").result()
Traceback (most recent call last):
...
ZeroDivisionError: division by zero
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any

from gcs.runtime import internals


class Background:
    """``work(stop)`` in a daemon thread, in a copy of the caller's context (so request-scoped state, such as
    Gradio's progress tracking, follows it). ``stop`` is the caller's event or a fresh one: setting it asks the
    work to end early, which ``work`` must check."""

    def __init__(self, work: Callable[[threading.Event], Any], name: str, stop: threading.Event | None = None):
        self.stop = threading.Event() if stop is None else stop
        self.error: BaseException | None = None
        self.finished = False  # True once ``work`` returned (not raised)
        self._result = None
        context = contextvars.copy_context()
        # the caller waits on the work: its idle OpenMP team would slow every parallel region of the work's own
        internals.release_openmp_threads()
        self.thread = threading.Thread(target=context.run, args=(self._run, work), daemon=True, name=name)
        self.thread.start()

    def _run(self, work) -> None:
        try:
            self._result = work(self.stop)
            self.finished = True
        except BaseException as error:  # re-raised in the caller's thread by ``result``
            self.error = error

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to ``timeout`` seconds for the work to end; whether it has."""
        self.thread.join(timeout)
        return not self.thread.is_alive()

    def result(self):
        """Wait for the work; its return value, or its exception raised here."""
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self._result


def releasing_openmp(function: Callable) -> Callable:
    """``function`` (plain or a generator function) run as it is, letting the OpenMP team of the thread it ran in go
    (``internals.release_openmp_threads``) each time it returns, raises or yields: for work a thread pool calls (a
    web server's request threads), beside a thread that generates.

    A pool thread that ran one parallel region keeps an idle team until the thread ends, and while GNU OpenMP manages
    more threads than there are cores it throttles the spinning of every team: the app's coupling explorer, filled
    as a page loads, left its request thread's team behind, and a generation beside such a thread took 1.27x as
    long until the pool let that thread go (docs/benchmarks.md, "Threads"). The wrapper keeps ``function``'s name,
    signature and attributes (a web framework reads them).

    >>> @releasing_openmp
    ... def countdown(n):
    ...     yield from range(n, 0, -1)
    >>> list(countdown(3)), releasing_openmp(max)(2, 7)
    ([3, 2, 1], 7)
    """
    if getattr(function, "releases_openmp", False):  # already lets go, at each of its steps: no second layer
        return function
    if inspect.isgeneratorfunction(function):
        @functools.wraps(function)
        def steps(*args, **kwargs):
            inner = function(*args, **kwargs)
            try:
                while True:
                    try:
                        item = next(inner)
                    except StopIteration as end:
                        return end.value
                    finally:
                        internals.release_openmp_threads()
                    yield item
            finally:
                inner.close()

        wrapper: Any = steps
    else:
        @functools.wraps(function)
        def call(*args, **kwargs):
            try:
                return function(*args, **kwargs)
            finally:
                internals.release_openmp_threads()

        wrapper = call
    wrapper.releases_openmp = True  # what a test of the app's wiring looks for
    return wrapper
