"""The job heartbeat of countersign's workers (`workers.CountersignWorker`): one thread a worker, not
one a job, renewing the running job's heartbeats as RQ's forking worker does from its parent
(`BaseWorker.maintain_heartbeats`), so a killed worker's job is found abandoned and retried about
90 s after its last beat (see `workers`' module docstring, "A job's heartbeat while it runs")."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from rq.executions import Execution
from rq.job import Job
from rq.worker import BaseWorker


class JobHeartbeat:
    """The thread of a worker that renews the running job's, its execution's and the worker's
    heartbeats every `job_monitoring_interval` seconds of that job (RQ's `maintain_heartbeats`);
    started with the first job, it waits while no job runs. A beat is sent holding the lock, so
    `running` returns with no beat under way for its job."""

    def __init__(self, worker: BaseWorker) -> None:
        self._worker = worker
        self._changed = threading.Condition()
        self._running: tuple[Job, Execution] | None = None
        self._stopped = False
        self._thread: threading.Thread | None = None

    @contextmanager
    def running(self, job: Job, execution: Execution) -> Iterator[None]:
        """Beat for `job` while the enclosed block runs it."""
        with self._changed:
            self._running = (job, execution)
            self._changed.notify()
        if self._thread is None:
            self._thread = threading.Thread(target=self._beat, name="job heartbeat", daemon=True)
            self._thread.start()
        try:
            yield
        finally:
            with self._changed:
                self._running = None
                self._changed.notify()

    def stop(self) -> None:
        """End the thread (the worker is done), once no job runs."""
        with self._changed:
            self._stopped = True
            self._changed.notify()
        if self._thread is not None:
            self._thread.join()

    def _beat(self) -> None:
        with self._changed:
            while not self._stopped:
                running = self._running
                if running is None:
                    self._changed.wait()
                    continue
                timed_out = not self._changed.wait(self._worker.job_monitoring_interval)
                if timed_out and self._running is running:
                    self._send(*running)

    def _send(self, job: Job, execution: Execution) -> None:
        try:
            self._worker.maintain_heartbeats(job, execution)
        except Exception as exc:  # the next beat tries again; the job goes on, and so does this thread
            self._worker.log.warning("job %s: heartbeat not sent (%s)", job.id, exc)
