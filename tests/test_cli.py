"""The command line as a user runs it: settings errors, start-up failures, `request`, `show`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from redis import Redis

from countersign.agent import ApprovalClient
from countersign.cli import main
from countersign.config import ConfigError, load_settings
from countersign.ports import free_port
from countersign.sandbox import Sandbox
from countersign.store import Store
from tests.helpers import README_REQUEST, drain

# Where the commands run unless a test says otherwise: a directory without a `.run/.env` (one left in
# the repository by `make run` would otherwise set what these tests leave unset).
NO_RUN_DIR = Path(tempfile.mkdtemp(prefix="countersign-cli-"))


def cli(
    *args: str, env: dict[str, str] | None = None, cwd: Path = NO_RUN_DIR
) -> subprocess.CompletedProcess[str]:
    """Run `countersign ARGS` in a new process (as a user would), capturing output."""
    return subprocess.run(
        [sys.executable, "-m", "countersign.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ["PATH"], **(env or {})},
        cwd=cwd,
    )


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("PORT", "eighty", "PORT: Input should be a valid integer"),
        ("PORT", "70000", "PORT: Input should be less than or equal to 65535"),
        ("REDIS_URL", "http://localhost:6379", "REDIS_URL: must start with redis://"),
        ("DATABASE_URL", "mysql://db/x", "DATABASE_URL: must be a sqlite:// or postgresql:// URL"),
        (
            "COUNTERSIGN_POLICY",
            "/no/such/policy.yml",
            "COUNTERSIGN_POLICY: no such file: /no/such/policy.yml",
        ),
        ("SLACK_BOT_TOKEN", "xoxp-user-token", "SLACK_BOT_TOKEN: must be a bot token starting with xoxb-"),
        ("SLACK_API_URL", "not a url", "SLACK_API_URL: Input should be a valid URL"),
    ],
)
def test_malformed_setting_fails_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, message: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as raised:
        load_settings()
    assert str(raised.value).startswith(message)
    if name in ("SLACK_BOT_TOKEN", "REDIS_URL", "DATABASE_URL"):
        assert value not in str(raised.value)  # secrets (and URLs that may hold one) are not echoed


def test_command_stops_at_start_with_one_line_naming_the_missing_variable() -> None:
    result = cli("web")
    assert result.returncode == 2
    assert (
        result.stderr.strip() == "countersign: error: SLACK_BOT_TOKEN is not set; `countersign web` needs it"
    )

    result = cli("worker", env={"SLACK_BOT_TOKEN": "xoxb-1", "PORT": "x"})
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "countersign: error: PORT: Input should be a valid integer, "
        "unable to parse string as an integer (got 'x')"
    )


def test_bad_request_exits_nonzero_with_one_line_and_no_traceback(env: dict[str, str]) -> None:
    base = [
        "request",
        "--action",
        "issue_refund",
        "--summary",
        "s",
        "--requester",
        "a",
        "--run-id",
        "r",
        "--step",
        "s",
        "--resume-queue",
        "q",
        "--resume-func",
        "m.f",
    ]
    result = cli(*base, "--payload", "[1]", env=env)
    assert (result.returncode, result.stderr) == (
        1,
        "countersign: error: payload: should be a JSON object\n",
    )
    result = cli(*base, "--payload", "{amount: 1}", env=env)
    assert result.returncode == 2 and result.stderr.startswith(
        "countersign: error: --payload is not valid JSON"
    )
    assert "Traceback" not in result.stderr


def test_request_from_flags_and_from_a_file_then_show(
    env: dict[str, str],
    redis: Redis,
    client: ApprovalClient,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    flags = [*README_REQUEST, "--confidence", "0.8"]
    assert main(flags) == 0
    request_id = capsys.readouterr().out.strip()
    drain(redis)

    file = tmp_path / "request.json"
    file.write_text(
        json.dumps(
            {
                "action": "issue_refund",
                "payload": {"amount": "120.00", "currency": "USD"},
                "summary": "Refund ACME",
                "requester": "refund-agent",
                "run_id": "r1",
                "step": "s1",
                "confidence": 0.8,
                "resume": {"queue": "refund-agent", "func": "examples.refund_agent.resume"},
            }
        )
    )
    assert main(["request", "--file", str(file)]) == 0
    assert capsys.readouterr().out.strip() == request_id  # same key, same payload: same request

    assert main(["show", request_id]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["status"] == "pending"
    assert shown["request"]["confidence"] == 0.8 and shown["request"]["channel"] == "C0FINANCE"
    assert shown["card"]["channel"] == "C0FINANCE" and shown["decision"] is None
    assert [e["event"] for e in shown["audit"]] == ["requested", "card_posted"]

    assert main(["show", "01J00000000000000000000009"]) == 1
    assert capsys.readouterr().err == "countersign: error: no approval request '01J00000000000000000000009'\n"


def test_pending_lists_one_approvers_requests(
    env: dict[str, str], redis: Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(README_REQUEST) == 0
    request_id = capsys.readouterr().out.strip()
    drain(redis)
    assert main(["pending", "--approver", "U0ALICE"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert (listed["request_id"], listed["channel"], listed["summary"]) == (
        request_id,
        "C0FINANCE",
        "Refund ACME",
    )
    assert listed["card_ts"] and listed["level"] == 0 and listed["created_at"].endswith("Z")
    assert main(["pending", "--approver", "U0BOB"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert main(["pending", "--approver", "U0ALICE", "--limit", "0"]) == 2
    assert capsys.readouterr().err == "countersign: error: --limit must be at least 1\n"


@pytest.mark.parametrize(
    ("args", "file_bytes", "status", "message"),
    [
        (["--payload", "[" * 5000], None, 2, "--payload is nested too deeply"),
        (["--payload", '{"a": 1, "a": 2}'], None, 2, "--payload: key written twice: a"),
        ([], b"\xff\xfe{}", 2, "is not UTF-8 text"),
        ([], b'{"resume": "q"}', 1, "resume: should be a JSON object"),
    ],
)
def test_malformed_cli_input_is_one_line(
    tmp_path: Path, args: list[str], file_bytes: bytes | None, status: int, message: str
) -> None:
    if file_bytes is not None:
        (tmp_path / "r.json").write_bytes(file_bytes)
        args = ["--file", str(tmp_path / "r.json")]
    result = cli("request", *args, env={"REDIS_URL": "redis://127.0.0.1:1/0"})
    assert result.returncode == status, result.stderr
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_unreachable_or_unmigrated_database_is_one_line(tmp_path: Path, policy_file: Path) -> None:
    empty = {"DATABASE_URL": f"sqlite:///{tmp_path / 'empty.db'}", "REDIS_URL": "redis://127.0.0.1:1/0"}
    result = cli("show", "01J00000000000000000000000", env=empty)
    assert result.returncode == 2 and result.stderr.startswith(
        "countersign: error: DATABASE_URL: database error"
    )
    worker = cli(
        "worker",
        env={
            **empty,
            "SLACK_BOT_TOKEN": "xoxb-1",
            "COUNTERSIGN_POLICY": str(policy_file),
            "COUNTERSIGN_SECRET": "c",
        },
    )
    assert worker.returncode == 2
    assert "the database schema is at nothing" in worker.stderr
    assert worker.stderr.strip().endswith("; run `countersign db upgrade`")
    bad_port = cli("request", "--action", "x", env={"REDIS_URL": "redis://localhost:abc/0"})
    assert bad_port.stderr.strip() == "countersign: error: REDIS_URL: has a port that is not a number"


def test_web_refuses_a_port_in_use(tmp_path: Path) -> None:
    from countersign.store import create_db_engine, upgrade

    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    upgrade(create_db_engine(url))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = cli(
            "web",
            "--host",
            "127.0.0.1",
            env={
                "SLACK_BOT_TOKEN": "xoxb-1",
                "SLACK_SIGNING_SECRET": "s",
                "COUNTERSIGN_SECRET": "c",
                "DATABASE_URL": url,
                "PORT": str(port),
            },
        )
    assert (result.returncode, result.stderr.strip()) == (
        2,
        f"countersign: error: PORT: {port} is already in use on 127.0.0.1",
    )


def test_the_sandbox_refuses_a_port_in_use_and_web_a_worker_count_below_one() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = cli("sandbox", "--port", str(port), env={"SLACK_SIGNING_SECRET": "s"})
    assert (result.returncode, result.stderr.strip()) == (
        2,
        f"countersign: error: --port: {port} is already in use on 127.0.0.1",
    )
    result = cli("web", "--workers", "0")
    assert result.returncode == 2 and "'0' is not a whole number of at least 1" in result.stderr
    assert "Traceback" not in result.stderr


def test_socket_mode_names_itself_when_a_setting_is_missing() -> None:
    result = cli("socket", env={"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP_TOKEN": "xapp-1"})
    assert (result.returncode, result.stderr.strip()) == (
        2,
        "countersign: error: COUNTERSIGN_SECRET is not set; `countersign socket` needs it",
    )


# Each way a command cannot start: the settings that break it, and the start of its one line (`{closed}`
# is a port nothing listens on).
BROKEN = {
    "redis": (
        {"REDIS_URL": "redis://127.0.0.1:{closed}/0"},
        "REDIS_URL: Redis does not answer at redis://127.0.0.1:{closed}/0 (from the environment) "
        "(Error 111 connecting to 127.0.0.1:{closed}",
    ),
    "database": (
        {"DATABASE_URL": "postgresql://postgres:pw@127.0.0.1:{closed}/x"},
        "DATABASE_URL: cannot use the database at postgresql://postgres:***@127.0.0.1:{closed}/x "
        "(from the environment) (connection failed",
    ),
    "schema": (
        {"DATABASE_URL": f"sqlite:///{NO_RUN_DIR}/empty-{{closed}}.db"},
        "DATABASE_URL: the database schema is at nothing, this version needs",
    ),
    "slack unreachable": (
        {"SLACK_API_URL": "http://127.0.0.1:{closed}/api/"},
        "SLACK_API_URL: no usable answer from Slack's Web API at http://127.0.0.1:{closed}/api/ "
        "([Errno 111] Connection refused); check the network",
    ),
    "bad token": (
        {"SLACK_BOT_TOKEN": "xoxb-revoked"},
        "SLACK_BOT_TOKEN: Slack refused the token (invalid_auth); set it to a valid token",
    ),
}
COMMANDS = {
    "web": ["web", "--host", "127.0.0.1"],
    "worker": ["worker"],
    "socket": ["socket"],
    "agent-worker": ["agent-worker", "refund-agent"],
    "request": README_REQUEST,
    "db upgrade": ["db", "upgrade"],
}
STORES = ("redis", "database", "schema")  # what a command that never calls Slack can find broken
CANNOT_START = [
    *[(command, broken) for command in ("web", "worker", "socket") for broken in BROKEN],
    *[(command, broken) for command in ("agent-worker", "request") for broken in STORES],
    ("db upgrade", "database"),
]


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # the other database is a broken one
@pytest.mark.parametrize(("command", "broken"), CANNOT_START)
def test_a_command_that_cannot_start_says_why_in_one_line_and_exits_2(
    env: dict[str, str], sandbox: tuple[Sandbox, str], command: str, broken: str
) -> None:
    sandbox[0].bot_token = env["SLACK_BOT_TOKEN"]  # any other token is one Slack does not know
    closed = str(free_port())
    settings, expected = BROKEN[broken]
    broken_env = {name: value.format(closed=closed) for name, value in settings.items()}
    result = cli(
        *COMMANDS[command],
        env={**env, "PORT": str(free_port()), "SLACK_APP_TOKEN": "xapp-1", **broken_env},
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("countersign: error: " + expected.format(closed=closed)), result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr  # no traceback, no second line
    assert result.stdout == ""


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_request_reads_run_env_the_environment_wins_and_stderr_names_what_was_used(
    env: dict[str, str], redis: Redis, store: Store, tmp_path: Path
) -> None:
    """A second terminal without REDIS_URL uses what `countersign run` wrote to `.run/.env`; a variable
    set in the environment wins over the file."""
    closed = free_port()
    (tmp_path / ".run").mkdir()
    (tmp_path / ".run/.env").write_text(
        f'REDIS_URL="redis://127.0.0.1:{closed}/0"\nDATABASE_URL="{env["DATABASE_URL"]}"\n'
    )
    refused = cli(*README_REQUEST, cwd=tmp_path)
    assert (refused.returncode, refused.stdout) == (2, "")
    assert refused.stderr.startswith(
        f"countersign: error: REDIS_URL: Redis does not answer at redis://127.0.0.1:{closed}/0 "
        "(from .run/.env)"
    )

    sent = cli(*README_REQUEST, env={"REDIS_URL": env["REDIS_URL"]}, cwd=tmp_path)
    assert sent.returncode == 0, sent.stderr
    request_id = sent.stdout.strip()  # stdout is the id alone
    assert sent.stderr == (
        f"countersign request: sent to Redis at {env['REDIS_URL']} (from the environment), "
        f"database at {env['DATABASE_URL']} (from .run/.env)\n"
    )
    assert store.intake_message(request_id) is not None  # in the database .run/.env names
    drain(redis)  # and its intake job on the Redis of the environment
    assert store.get(request_id) is not None


def test_help_of_run_and_request_names_their_settings_and_required_flags() -> None:
    run = cli("run", "--help")
    assert run.returncode == 0
    for text in ("No flag is required", "PORT", "REDIS_URL", "DATABASE_URL", "SLACK_BOT_TOKEN", ".run/.env"):
        assert text in run.stdout, text
    request = cli("request", "--help")
    assert request.returncode == 0
    assert (
        "Required, as flags or as fields of --file: --action, --payload, --summary, --requester, --run-id "
        "and\n--step (or --idempotency-key), --resume-queue and --resume-func." in request.stdout
    )
    for text in ("REDIS_URL", "DATABASE_URL", ".run/.env", "printed on stderr"):
        assert text in request.stdout, text


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("broken", ["port in use", "bad token", "database"])
def test_make_run_that_cannot_start_says_why_in_one_line_and_exits_2(
    env: dict[str, str], sandbox: tuple[Sandbox, str], tmp_path: Path, broken: str
) -> None:
    """`countersign run` with real Slack settings (here the sandbox as Slack, so it starts no sandbox of
    its own): each failure stops it before any command starts, in one line."""
    sandbox[0].bot_token = env["SLACK_BOT_TOKEN"]
    closed = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        settings, expected = {
            "port in use": ({"PORT": str(busy)}, f"PORT: {busy} is already in use on 127.0.0.1; set PORT"),
            "bad token": ({"SLACK_BOT_TOKEN": "xoxb-revoked"}, BROKEN["bad token"][1]),
            "database": (
                {"DATABASE_URL": f"postgresql://postgres@127.0.0.1:{closed}/x"},
                f"DATABASE_URL: cannot use the database at postgresql://postgres@127.0.0.1:{closed}/x",
            ),
        }[broken]
        result = cli("run", env={**env, "PORT": str(free_port()), **settings}, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("countersign: error: " + expected), result.stderr
    assert len(result.stderr.splitlines()) == 1 and result.stdout == "", result.stderr
    assert not (tmp_path / ".run/.env").exists()  # nothing started, nothing to tell a second terminal
