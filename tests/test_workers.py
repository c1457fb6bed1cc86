"""countersign's RQ worker class (`countersign/workers.py`): RQ's bookkeeping of the worker itself is
sent every few seconds, not several times a job, RQ still finds the job of a killed worker
abandoned and runs it again, and a warm shutdown is not lost wherever its signal lands."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from redis import Redis
from rq import Callback, RateLimit, Retry, SimpleWorker
from rq.job import Job
from rq.serializers import JSONSerializer

from countersign.defaults import INTAKE_JOB_PREFIX, RESUME_JOB_PREFIX, RESUME_MARKER_TTL_SECONDS
from countersign.router.jobs import RESUME_DONE_CALLBACK, RESUMED, json_queue, resumed_key
from countersign.workers import CountersignWorker
from tests.helpers import REPO, agent, wait_for
from tests.helpers.redis_server import RedisServer

QUEUE = "test-workers"
JOBS = 20


def _commands_a_job(redis: Redis, worker_class: type[SimpleWorker]) -> float:
    """Redis commands a no-op job costs on `worker_class` (burst), as an intake or resume job is
    enqueued: unique id, deleted once run."""
    queue = json_queue(QUEUE, redis)
    for n in range(JOBS):
        queue.enqueue(agent.PROCESS_FUNC, n, job_id=f"{RESUME_JOB_PREFIX}{n}", unique=True, result_ttl=0)
    before = int(redis.info("stats")["total_commands_processed"])
    worker_class([queue], connection=redis, serializer=JSONSerializer).work(burst=True)
    return (int(redis.info("stats")["total_commands_processed"]) - before) / JOBS


def test_the_worker_sends_rqs_bookkeeping_of_itself_every_few_seconds_not_several_times_a_job(
    redis: Redis,
) -> None:
    """Issue 14: RQ's `SimpleWorker` renews its own hash, TTL and state four or five times a job
    (about 65 Redis commands a no-op job here); countersign's class sends 25 (a job started in one
    transaction, and deleted in one as it succeeds), and every job still ran and was deleted."""
    simple = _commands_a_job(redis, SimpleWorker)
    ours = _commands_a_job(redis, CountersignWorker)
    assert simple > 55 and ours < 27, (simple, ours)
    assert json_queue(QUEUE, redis).count == 0
    assert not [key for key in redis.keys(f"rq:job:{RESUME_JOB_PREFIX}*")]  # deleted once run, as RQ does
    assert not redis.smembers(f"rq:worker:{_only_worker(redis)}:executions")  # no execution left
    assert not redis.keys("rq:execution*") and not json_queue(QUEUE, redis).started_job_registry.count
    assert "job heartbeat" not in [thread.name for thread in threading.enumerate()]  # ended with the worker


def test_countersigns_jobs_in_a_lane_leave_it_as_they_succeed(redis: Redis) -> None:
    """An intake job in its lane (RQ's `RateLimit`) deleted in one transaction as it succeeds still
    lets the next job of the lane onto the queue (RQ's `release_slot`): all of a burst three lanes'
    widths long runs, and no job, execution record or lane entry is left."""
    queue = json_queue(QUEUE, redis)
    lane = RateLimit("countersign:intake:test", 2)
    for n in range(6):
        queue.enqueue(agent.PROCESS_FUNC, n, job_id=f"{INTAKE_JOB_PREFIX}{n}", rate_limit=lane, result_ttl=0)
    assert queue.count == 2  # the others wait in the lane
    CountersignWorker([queue], connection=redis, serializer=JSONSerializer).work(burst=True)
    assert queue.count == 0 and not redis.keys(f"rq:job:{INTAKE_JOB_PREFIX}*")
    assert not redis.keys("rq:execution*") and not queue.started_job_registry.count
    assert not redis.zcard("rq:rl:countersign:intake:test:allowed")
    assert not redis.zcard("rq:rl:countersign:intake:test:rate_limited")


def test_a_lane_slot_is_released_with_the_width_its_job_carries(redis: Redis) -> None:
    """A job ending in its lane frees its slot with the lane's width the job was enqueued with, not
    one read back from the lane's hash (`_release_lane`, one round trip fewer): with that hash gone
    (RQ would read a width of 0 and let no waiting job on), every job of the burst still runs, two
    at a time, and the lane ends empty."""
    queue = json_queue(QUEUE, redis)
    lane = RateLimit("countersign:intake:width", 2)
    for n in range(5):
        queue.enqueue(agent.PROCESS_FUNC, n, job_id=f"{INTAKE_JOB_PREFIX}w{n}", rate_limit=lane, result_ttl=0)
    assert redis.delete("rq:rl:countersign:intake:width") == 1  # the lane's hash, with its width
    assert queue.count == 2 and redis.zcard("rq:rl:countersign:intake:width:rate_limited") == 3
    CountersignWorker([queue], connection=redis, serializer=JSONSerializer).work(burst=True)
    assert queue.count == 0 and not redis.keys(f"rq:job:{INTAKE_JOB_PREFIX}*")
    assert not redis.zcard("rq:rl:countersign:intake:width:allowed")
    assert not redis.zcard("rq:rl:countersign:intake:width:rate_limited")


def _resume_job_commands(redis: Redis, worker_class: type[SimpleWorker], request_id: str) -> list[str]:
    """The Redis commands (MONITOR) of a resume job of request `request_id` with countersign's
    `on_success` callback (`resume_done`), run on `worker_class` (burst) in this process."""
    queue = json_queue(QUEUE, redis)
    job_id = f"{RESUME_JOB_PREFIX}{request_id}"
    queue.enqueue(
        agent.PROCESS_FUNC,
        0,
        job_id=job_id,
        unique=True,
        result_ttl=0,
        on_success=Callback(RESUME_DONE_CALLBACK),
    )
    seen: list[str] = []
    end = f"test-workers-end-{request_id}"

    def listen() -> None:
        with redis.monitor() as monitor:  # type: ignore[no-untyped-call]
            ready.set()
            for command in monitor.listen():
                if str(command["command"]) == f"EXISTS {end}":
                    return
                seen.append(str(command["command"]))

    ready = threading.Event()
    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    assert ready.wait(10)
    worker_class([queue], connection=redis, serializer=JSONSerializer).work(burst=True)
    redis.exists(end)
    listener.join(10)
    assert queue.fetch_job(job_id) is None  # deleted once run
    return seen


def test_a_resume_jobs_marker_is_left_in_the_transaction_that_deletes_the_job(redis: Redis) -> None:
    """Issue 14: on countersign's worker the resume job's `on_success` marker (`resume_done`) goes in
    the MULTI/EXEC that deletes the job, not a round trip of its own; on RQ's own worker class, which
    has no such transaction, the callback still leaves it. Either way it is kept as long as ever."""
    for worker_class, request_id in ((CountersignWorker, "01TESTFOLDED"), (SimpleWorker, "01TESTAPART")):
        commands = _resume_job_commands(redis, worker_class, request_id)
        marker = resumed_key(request_id)
        assert redis.get(marker) == RESUMED and redis.ttl(marker) > RESUME_MARKER_TTL_SECONDS - 60
        at = next(n for n, command in enumerate(commands) if command.startswith(f"SET {marker} "))
        transaction = commands[max(i for i in range(at) if commands[i] == "MULTI") :]
        transaction = transaction[: transaction.index("EXEC")]
        deleted = any(c.startswith(f"DEL rq:job:{RESUME_JOB_PREFIX}{request_id}") for c in transaction)
        assert deleted == (worker_class is CountersignWorker), (worker_class, transaction)


def _only_worker(redis: Redis) -> str:
    names = {key.decode().split(":")[2] for key in redis.keys("rq:worker:*")}
    return names.pop() if len(names) == 1 else ""


WORKER = (
    "import sys; from redis import Redis; from rq.serializers import JSONSerializer;"
    "from countersign.router.jobs import json_queue; from countersign.workers import CountersignWorker;"
    "redis = Redis.from_url(sys.argv[1]);"
    "CountersignWorker([json_queue(sys.argv[2], redis)], connection=redis, serializer=JSONSerializer,"
    " maintenance_interval=int(sys.argv[3])).work()"
)
MAINTENANCE_SECONDS = 2  # a short maintenance interval, for the test


def _start_worker(
    redis_server: RedisServer, maintenance: int = MAINTENANCE_SECONDS, output: int = subprocess.DEVNULL
) -> subprocess.Popen[bytes]:
    """A countersign worker on `QUEUE` in a process of its own, RQ's maintenance every `maintenance`
    seconds, its log written to `output` (a file descriptor)."""
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, redis_server.url, QUEUE, str(maintenance)],
        cwd=REPO,
        stdout=output,
        stderr=output,
        start_new_session=True,  # Ctrl-C reaches pytest alone; its `finally` kills it
    )


def _state(redis: Redis, pid: int) -> str | None:
    """The state RQ's worker hash of the worker with process id `pid` says, if there is one."""
    for key in redis.keys("rq:worker:*"):
        if key.count(b":") == 2 and redis.hget(key, "pid") == str(pid).encode():
            state = redis.hget(key, "state")
            return state.decode() if state else None
    return None


def test_a_killed_workers_job_is_still_found_abandoned_and_run_again(
    redis: Redis, redis_server: RedisServer
) -> None:
    """The worker's own heartbeat is sent less often, but a running job's is not: once the worker
    is SIGKILLed mid-job, RQ's maintenance finds the job abandoned within its monitoring interval
    plus 60 s (90 s) of its last heartbeat, and its `Retry` puts it back on the queue."""
    queue = json_queue(QUEUE, redis)
    job = queue.enqueue(agent.HANG_FUNC, retry=Retry(max=1), job_timeout=600)
    worker = _start_worker(redis_server)
    try:
        wait_for(lambda: redis.get(agent.HANGING_KEY), timeout=60, what="the job to start")
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=20)
        registry = queue.started_job_registry
        assert registry.get_job_ids(), "the running job is in RQ's started registry"
        registry.cleanup(timestamp=time.time() + 80)  # not yet: its heartbeat is still valid
        assert job.get_status(refresh=True) == "started"
        registry.cleanup(timestamp=time.time() + 95)  # RQ's maintenance, 95 s later
        assert job.get_status(refresh=True) == "queued" and queue.job_ids == [job.id]
        assert Job.fetch(job.id, connection=redis, serializer=JSONSerializer).retries_left == 0
    finally:
        if worker.poll() is None:
            worker.kill()


def test_an_idle_worker_runs_a_killed_workers_job_again_within_its_maintenance_interval(
    redis: Redis, redis_server: RedisServer
) -> None:
    """RQ's maintenance, which finds a killed worker's job abandoned, runs between dequeues only, and
    RQ blocks an idle worker in a dequeue for `worker_ttl` - 15 s (405 s): a worker restarted after
    another was killed, idle by the time that one's job ran out of heartbeat, took it about 7
    minutes later. countersign's worker dequeues for at most its maintenance interval, so it finds
    the job within that interval (and one more, should a dequeue have begun just before the
    maintenance was due), and its `Retry` puts it back on the queue at once, where that worker
    takes it."""
    queue = json_queue(QUEUE, redis)
    queue.enqueue(agent.HANG_FUNC, retry=Retry(max=1), job_timeout=600)
    killed, restarted = _start_worker(redis_server), None
    try:
        wait_for(lambda: redis.get(agent.HANGING_KEY), timeout=60, what="the job to start")
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=20)
        redis.delete(agent.HANGING_KEY)
        restarted = _start_worker(redis_server)
        pid = restarted.pid
        wait_for(lambda: _state(redis, pid) == "idle", timeout=60, what="the restarted worker to wait idle")
        # idle, its first maintenance done: the killed worker's job now runs out of heartbeat, as it
        # would 90 s after its last one (RQ's maintenance reads the started registry's scores)
        registry = queue.started_job_registry
        (execution,) = redis.zrange(registry.key, 0, -1)
        redis.zadd(registry.key, {execution: time.time() - 1})
        wait_for(
            lambda: redis.get(agent.HANGING_KEY),
            timeout=2 * MAINTENANCE_SECONDS + 10,  # two intervals, and 10 s for a loaded machine
            what="the restarted worker to run the killed worker's job again",
        )
        assert _state(redis, pid) == "busy"
    finally:
        for worker in (killed, restarted):
            if worker is not None and worker.poll() is None:
                worker.kill()
                worker.wait(timeout=20)


def test_a_stop_asked_for_as_a_job_succeeds_ends_the_worker_after_the_job(redis: Redis) -> None:
    """RQ's warm shutdown (SIGTERM) waits for a busy worker's job and raises at once in an idle one.
    The success transaction of an intake or resume job writes the worker's `idle` state, but the
    worker stays busy until the job has returned: a stop asked for right after that transaction
    (here: as the job's success is logged) ends the worker after the job, not by an exception in
    the middle of it, where a logging call would swallow it and the worker would never stop."""
    queue = json_queue(QUEUE, redis)
    for n in range(3):
        queue.enqueue(agent.PROCESS_FUNC, n, job_id=f"{RESUME_JOB_PREFIX}stop-{n}", unique=True, result_ttl=0)
    worker = CountersignWorker([queue], connection=redis, serializer=JSONSerializer)
    stopped = []

    class StopOnSuccess:
        def info(self, message: str, *args: object) -> None:
            if message.startswith("Successfully completed") and not stopped:
                stopped.append(worker.get_state())
                worker.request_stop(signal.SIGTERM, None)

        def __getattr__(self, name: str) -> object:
            return getattr(worker_log, name)

    worker_log, worker.log = worker.log, StopOnSuccess()  # type: ignore[assignment]
    worker.work(burst=True)
    assert stopped == ["busy"]  # still busy as the success was recorded
    assert queue.count == 2  # stopped after the first job, the others left for the next worker
    assert not Job.exists(f"{RESUME_JOB_PREFIX}stop-0", connection=redis)  # which ran and was deleted


class _LogReader(threading.Thread):
    """Reads a worker's log from the read end of its pipe (and drops it) while not paused."""

    def __init__(self, fd: int) -> None:
        super().__init__(daemon=True)
        self.fd, self.reading, self.lock = fd, threading.Event(), threading.Lock()
        self.reading.set()

    def run(self) -> None:
        while self.reading.wait():
            with self.lock:
                ready = self.reading.is_set() and select.select([self.fd], [], [], 0.1)[0]
                if ready and not os.read(self.fd, 1 << 16):
                    return

    def pause(self) -> None:
        """Stop reading; returns once no read is under way."""
        self.reading.clear()
        with self.lock:
            pass


def _fill(fd: int) -> None:
    """Write to the non-blocking `fd` (a pipe) until it is full."""
    for size in (1 << 16, 1):
        try:
            while True:
                os.write(fd, b"x" * size)
        except BlockingIOError:
            pass


def _blocked_writing(pid: int) -> bool:
    """Process `pid`'s main thread waits in a write to a full pipe (Linux's /proc)."""
    return "pipe_write" in Path(f"/proc/{pid}/wchan").read_text()


def test_a_stop_landing_in_the_log_line_of_a_job_just_taken_ends_the_worker_after_that_job(
    redis: Redis, redis_server: RedisServer
) -> None:
    """RQ's warm shutdown raised `StopRequested`, an `Exception`, where the signal landed in a worker
    running no job; landing in a log call (whose `emit` catches every `Exception`) it was swallowed,
    and the worker went on taking jobs for good. Here the signal lands in RQ's log line of the job it
    has just taken (its log pipe full, as a slow reader leaves it): the worker runs that job, then
    ends."""
    read_end, write_end = os.pipe()
    filler = os.open(f"/proc/self/fd/{write_end}", os.O_WRONLY | os.O_NONBLOCK)  # the worker's end blocks
    worker = _start_worker(redis_server, maintenance=600, output=write_end)
    os.close(write_end)
    reader = _LogReader(read_end)
    reader.start()
    try:
        wait_for(lambda: _state(redis, worker.pid) == "idle", timeout=60, what="the worker to wait idle")
        reader.pause()
        _fill(filler)
        job = json_queue(QUEUE, redis).enqueue(agent.FUNC, {"outcome": "approved"}, result_ttl=0)
        wait_for(lambda: _blocked_writing(worker.pid), timeout=30, what="the worker to log the job it took")
        worker.terminate()
        reader.reading.set()
        worker.wait(timeout=30)  # TimeoutExpired: the stop was lost, the worker runs on
        assert agent.resumed(redis) == [{"outcome": "approved"}]  # the job it had taken ran
        taken_off = json_queue(QUEUE, redis).intermediate_queue_key
        assert not Job.exists(job.id, connection=redis) and not redis.lrange(taken_off, 0, -1)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        os.close(filler)
        reader.reading.set()
        reader.join(timeout=10)  # every write end closed: it reads the end of the log
        os.close(read_end)


def test_a_second_sigterm_stops_a_worker_in_its_job_at_once_and_the_job_is_retried(
    redis: Redis, redis_server: RedisServer
) -> None:
    """The first SIGTERM waits for the running job (a warm shutdown); a second one, a second or more
    later (RQ ignores one sooner), is RQ's cold shutdown: the job is cut short, recorded as failed and
    put back on its queue by its `Retry`, and the worker ends."""
    queue = json_queue(QUEUE, redis)
    job = queue.enqueue(agent.HANG_FUNC, retry=Retry(max=1), job_timeout=600)
    worker = _start_worker(redis_server)
    try:
        wait_for(lambda: redis.get(agent.HANGING_KEY), timeout=60, what="the job to start")
        worker.terminate()
        key = f"rq:worker:{_only_worker(redis)}"
        wait_for(lambda: redis.hget(key, "shutdown_requested_date"), what="the warm shutdown")
        first = time.monotonic()
        wait_for(lambda: time.monotonic() - first > 1.5, what="RQ's second between the two signals")
        assert worker.poll() is None and job.get_status(refresh=True) == "started"  # waiting for the job
        worker.terminate()
        worker.wait(timeout=30)
        assert job.get_status(refresh=True) == "queued" and queue.job_ids == [job.id]
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
