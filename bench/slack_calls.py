"""CPU and wall time per Slack Web API call through the router's client (`Runtime.slack`).

Sends `--pairs` chat.postMessage + chat.update pairs, one after another, to a sandbox in another
process, over plain HTTP and over HTTPS (the sandbox's self-signed certificate, trusted through
`SSL_CERT_FILE` so the client is built exactly as the router builds it), after `--warm-up` pairs.
Prints, per scheme, this process's CPU per call (user + system, the client's whole cost: urllib or
urllib3, TLS, slack_sdk), the server's CPU per call and the wall time per call.

Usage::

    python bench/slack_calls.py [--pairs 500] [--warm-up 20]
    python bench/slack_calls.py --serve DIR   # a sandbox (HTTP and HTTPS) for other checkouts' runs
    python bench/slack_calls.py --http URL --https URL --cafile PEM --server-pid PID

The second form serves both sandboxes and prints their URLs, the certificate and its pid; the third
measures against them (so that an older checkout, whose sandbox cannot serve HTTPS, is measured
against the same servers).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from slack_sdk import WebClient

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import print_table
from countersign.config import Settings
from countersign.router.runtime import Runtime

CHANNEL = "C0BENCH"


def serve_forever(directory: str) -> None:
    """Serve a sandbox over HTTP and another over HTTPS; print ``http https certificate pid``."""
    from countersign.sandbox import Sandbox, serve

    plain = serve(Sandbox(signing_secret="bench"))
    tls = serve(Sandbox(signing_secret="bench"), tls_directory=directory)
    print(plain.url, tls.url, tls.certificate, os.getpid(), flush=True)
    threading.Event().wait()


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` (/proc/<pid>/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pairs(slack: WebClient, n: int) -> None:
    for _ in range(n):
        ts = slack.chat_postMessage(channel=CHANNEL, text="Approval needed")["ts"]
        slack.chat_update(channel=CHANNEL, ts=ts, text="Approved")


def measure(url: str, server_pid: int, pairs: int, warm_up: int) -> tuple[float, float, float]:
    """(client CPU, server CPU, wall) in milliseconds per call over `pairs` pairs."""
    slack = Runtime(Settings(SLACK_BOT_TOKEN="xoxb-bench", SLACK_API_URL=url + "/api/")).slack
    _pairs(slack, warm_up)
    cpu, server, wall = time.process_time(), _cpu_seconds(server_pid), time.perf_counter()
    _pairs(slack, pairs)
    calls = 2 * pairs
    return (
        (time.process_time() - cpu) * 1000 / calls,
        (_cpu_seconds(server_pid) - server) * 1000 / calls,
        (time.perf_counter() - wall) * 1000 / calls,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=500)
    parser.add_argument("--warm-up", type=int, default=20)
    parser.add_argument("--serve", metavar="DIR")
    parser.add_argument("--http")
    parser.add_argument("--https")
    parser.add_argument("--cafile")
    parser.add_argument("--server-pid", type=int)
    args = parser.parse_args()
    if args.serve:
        serve_forever(args.serve)
        return
    server = None
    if not args.http:
        directory = tempfile.mkdtemp(prefix="slack-calls-")
        server = subprocess.Popen(
            [sys.executable, __file__, "--serve", directory], stdout=subprocess.PIPE, text=True
        )
        assert server.stdout is not None
        args.http, args.https, args.cafile, pid = server.stdout.readline().split()
        args.server_pid = int(pid)
    os.environ["SSL_CERT_FILE"] = args.cafile  # the default context trusts the sandbox's certificate
    try:
        rows: list[tuple[str, object]] = [
            ("client", type(Runtime(Settings(SLACK_BOT_TOKEN="xoxb-bench")).slack).__name__)
        ]
        for scheme, url in (("http", args.http), ("https", args.https)):
            cpu, server_cpu, wall = measure(url, args.server_pid, args.pairs, args.warm_up)
            rows += [
                (f"{scheme}: client CPU per call (ms)", f"{cpu:.3f}"),
                (f"{scheme}: sandbox CPU per call (ms)", f"{server_cpu:.3f}"),
                (f"{scheme}: wall per call (ms)", f"{wall:.3f}"),
            ]
        rows.append(("calls per scheme", 2 * args.pairs))
        print_table(rows)
    finally:
        if server is not None:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
