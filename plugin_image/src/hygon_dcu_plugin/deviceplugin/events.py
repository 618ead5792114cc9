"""Kubernetes Events on pods for what an operator must see, never at the cost of the work.

Granted (Normal); refused with the fix, reclaim stuck IN_USE, partition lost (Warning). Events
are sent by a background thread, so a slow or failing API server never delays or fails
Allocate or a reclaim pass; one that cannot be sent is logged and dropped. Bounded: the same
(pod, reason) at most once per ``repeat_seconds``, at most ``per_minute`` events a minute, a
queue of ``QUEUE_MAX``, messages cut to the API's 1 KiB.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable

from hygon_dcu_plugin.kube import KubeApi, PodRef

log = logging.getLogger(__name__)

NORMAL = "Normal"
WARNING = "Warning"
MESSAGE_MAX = 1024
QUEUE_MAX = 256
REMEMBERED = 4096  # (pod, reason) pairs kept for the dedupe

_Item = tuple[PodRef, str, str, str]


class PodEvents:
    def __init__(
        self,
        kube: KubeApi,
        *,
        repeat_seconds: float = 600.0,
        per_minute: int = 60,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kube = kube
        self._repeat = repeat_seconds
        self._per_minute = per_minute
        self._clock = clock
        self._lock = threading.Lock()
        self._last: OrderedDict[tuple[str, str], float] = OrderedDict()
        self._sent: deque[float] = deque()
        self._queue: queue.Queue[_Item] = queue.Queue(maxsize=QUEUE_MAX)
        self._worker: threading.Thread | None = None
        self.dropped = 0

    def _admit(self, key: tuple[str, str]) -> bool:
        now = self._clock()
        with self._lock:
            last = self._last.get(key)
            if last is not None and now - last < self._repeat:
                return False
            while self._sent and now - self._sent[0] >= 60.0:
                self._sent.popleft()
            if len(self._sent) >= self._per_minute:
                self.dropped += 1
                return False
            self._sent.append(now)
            self._last[key] = now
            self._last.move_to_end(key)
            while len(self._last) > REMEMBERED:
                self._last.popitem(last=False)
            if self._worker is None:
                self._worker = threading.Thread(target=self._run, name="events", daemon=True)
                self._worker.start()
            return True

    def emit(self, pod: PodRef, kind: str, reason: str, message: str) -> None:
        """Queue one event about ``pod``; never raises, never blocks."""
        if not self._admit((pod.uid, reason)):
            return
        text = message if len(message) <= MESSAGE_MAX else message[: MESSAGE_MAX - 3] + "..."
        try:
            self._queue.put_nowait((pod, kind, reason, text))
        except queue.Full:
            with self._lock:
                self.dropped += 1

    def drain(self, timeout: float = 10.0) -> bool:
        """Wait until every queued event was sent (or given up); True if it got there."""
        deadline = time.monotonic() + timeout
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        return not self._queue.unfinished_tasks

    def _run(self) -> None:
        while True:
            pod, kind, reason, text = self._queue.get()
            try:
                self._kube.create_event(pod, kind, reason, text)
            except Exception as exc:  # an event is worth less than the work it describes
                log.warning(
                    "cannot send a Kubernetes event",
                    extra={
                        "pod": f"{pod.namespace}/{pod.name}",
                        "reason": reason,
                        "error": str(exc),
                    },
                )
            finally:
                self._queue.task_done()
