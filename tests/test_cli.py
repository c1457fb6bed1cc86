"""The command line as a user runs it: settings errors, start-up failures, `request`, `show`."""

from __future__ import annotations

import base64
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from redis import Redis

from countersign.agent import ApprovalClient
from countersign.cli import main
from countersign.config import ConfigError, load_settings
from countersign.connections import REDIS_TIMEOUT_SECONDS
from countersign.ports import free_port
from countersign.router import relay
from countersign.router.jobs import json_queue
from countersign.router.runtime import Runtime
from countersign.sandbox import Sandbox
from countersign.schema import SLACK_USER_ID
from countersign.store import Store
from tests.helpers import README_REQUEST, anyone, drain, hold_channel, wait_for
from tests.helpers.builders import refund
from tests.helpers.redis_server import RedisServer

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
        ("PORT", "eighty", "PORT: should be a whole number (got 'eighty')"),
        ("PORT", "70000", "PORT: should be 65535 or less (got '70000')"),
        ("REDIS_URL", "http://localhost:6379", "REDIS_URL: must start with redis://"),
        ("DATABASE_URL", "mysql://db/x", "DATABASE_URL: must be a sqlite:// or postgresql:// URL"),
        (
            "COUNTERSIGN_POLICY",
            "/no/such/policy.yml",
            "COUNTERSIGN_POLICY: no such file: /no/such/policy.yml",
        ),
        ("SLACK_BOT_TOKEN", "xoxp-user-token", "SLACK_BOT_TOKEN: must be a bot token starting with xoxb-"),
        (
            "SLACK_API_URL",
            "not a url",
            "SLACK_API_URL: should be a URL (relative URL without a base) (got 'not a url')",
        ),
        (
            "COUNTERSIGN_RESUME_WAIT_SECONDS",
            "0",
            "COUNTERSIGN_RESUME_WAIT_SECONDS: should be 1 or more (got '0')",
        ),
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
    assert result.stderr.strip() == ("countersign: error: PORT: should be a whole number (got 'x')")

    result = cli("worker", env={"SLACK_BOT_TOKEN": "xoxb-1", "COUNTERSIGN_RESUME_WAIT_SECONDS": "5m"})
    assert (result.returncode, result.stderr) == (
        2,
        "countersign: error: COUNTERSIGN_RESUME_WAIT_SECONDS: should be a whole number (got '5m')\n",
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
        2,
        "countersign: error: payload: should be a JSON object\n",
    )
    router_queue = [*base[: base.index("q")], "countersign", *base[base.index("q") + 1 :]]
    result = cli(*router_queue, "--payload", '{"amount": "1.00"}', env=env)
    assert (result.returncode, result.stdout) == (2, "")
    refused = "countersign: error: resume.queue: 'countersign' is countersign's own queue"
    assert result.stderr.startswith(refused)
    result = cli(*base, "--payload", "{amount: 1}", env=env)
    assert result.returncode == 2 and result.stderr.startswith(
        "countersign: error: --payload is not valid JSON"
    )
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("left_out", "missing"),
    [
        (["--resume-func"], "--resume-func"),
        (["--resume-queue"], "--resume-queue"),
        (["--step"], "--step (or --idempotency-key)"),
        (["--run-id", "--step", "--summary"], "--summary, --run-id and --step (or --idempotency-key)"),
    ],
)
def test_request_names_the_flags_it_misses_in_one_line(left_out: list[str], missing: str) -> None:
    flags = README_REQUEST[1:]
    pairs = [flags[i : i + 2] for i in range(0, len(flags), 2)]
    given = [word for flag, value in pairs if flag not in left_out for word in (flag, value)]
    result = cli("request", *given)
    assert (result.returncode, result.stdout, result.stderr) == (
        2,  # bad input, as argparse's own missing-argument error
        "",
        f"countersign: error: missing {missing}: required, as flags or as fields of --file\n",
    )


def test_request_with_no_flag_names_every_required_flag() -> None:
    result = cli("request")
    assert (result.returncode, result.stderr) == (
        2,
        "countersign: error: missing --action, --payload, --summary, --requester, --run-id and --step (or "
        "--idempotency-key): required, as flags or as fields of --file\n",
    )


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # the form, not SQL
def test_a_resume_func_that_is_no_import_path_is_refused_at_request(env: dict[str, str]) -> None:
    """Only the form is checked: whether `examples.refund_agent.resum` imports is for the agent's
    worker to say (on the card), as the requester may not have the agent's code."""
    flags = [*README_REQUEST[:-1], "examples/refund_agent.py"]
    result = cli(*flags, env=env)
    assert (result.returncode, result.stderr) == (
        2,
        "countersign: error: resume.func: should be a dotted import path, module then function "
        "(e.g. examples.refund_agent.resume), which the agent's worker imports\n",
    )
    accepted = cli(*README_REQUEST[:-1], "examples.refund_agent.resum", env=env)
    assert accepted.returncode == 0 and len(accepted.stdout.strip()) == 26  # a request id


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
    times = [shown["request"]["created_at"], *(e["at"] for e in shown["audit"])]
    one_shape = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")  # RFC 3339 UTC, `Z`, µs
    assert all(one_shape.match(t) for t in times), times
    assert shown["resume"] is None  # not decided yet

    assert main(["show", "01J00000000000000000000009"]) == 2  # an id that names nothing: bad input
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


@pytest.mark.parametrize("approver", ["bogus", "u0alice", "<@U0ALICE>", ""])
def test_pending_checks_the_approver_is_a_slack_user_id_as_request_checks_on_behalf_of(
    env: dict[str, str], capsys: pytest.CaptureFixture[str], approver: str
) -> None:
    """Not an empty list for a typo: the same rule and words as `--on-behalf-of`, exit 2."""
    assert main(["pending", "--approver", approver]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"countersign: error: --approver: should be {SLACK_USER_ID.allowed}\n"
    assert main([*README_REQUEST, "--on-behalf-of", approver]) == 2
    assert f"on_behalf_of: should be {SLACK_USER_ID.allowed}" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "file_bytes", "status", "message"),
    [
        (["--payload", "[" * 5000], None, 2, "--payload: nested deeper than 32 levels"),
        (
            ["--payload", '{"n": ' + "9" * 5000 + "}"],
            None,
            2,
            "--payload: an integer of 5000 digits at n, over the 4300 digits a JSON integer may have here; "
            "send it as a string",
        ),
        (["--payload", '{"a": 1, "a": 2}'], None, 2, "--payload: key written twice: a"),
        ([], b"\xff\xfe{}", 2, "is not UTF-8 text"),
        (
            [],
            b'{"action": "a", "payload": {}, "summary": "s", "requester": "r", "idempotency_key": "k", '
            b'"resume": "q"}',
            2,
            "resume: should be a JSON object",
        ),
        ([], b'{"resume": "q"}', 2, "missing --action, --payload, --summary, --requester, --run-id and"),
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
        "countersign: error: DATABASE_URL: no SQLite database at"
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
    assert worker.returncode == 1  # not migrated: a failure at run time
    assert "the database has no countersign schema yet" in worker.stderr
    assert worker.stderr.strip().endswith("; create it with `countersign db upgrade`")
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
        "DATABASE_URL: the database has no countersign schema yet; create it with `countersign db upgrade`",
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
BAD_INPUT = {"bad token"}
"""What in `BROKEN` is bad input, exit 2 (a wrong setting); the rest fails at run time, exit 1."""
CANNOT_START = [
    *[(command, broken) for command in ("web", "worker", "socket") for broken in BROKEN],
    *[(command, broken) for command in ("agent-worker", "request") for broken in STORES],
    ("db upgrade", "database"),
]


def test_request_refuses_an_action_class_the_policy_does_not_name_before_enqueueing(
    env: dict[str, str], redis: Redis, client: ApprovalClient
) -> None:
    typo = [*README_REQUEST]
    typo[typo.index("issue_refund")] = "issue_refnd"
    result = cli(*typo, env=env)
    policy = env["COUNTERSIGN_POLICY"]
    assert (result.returncode, result.stdout, result.stderr) == (
        2,
        "",
        f"countersign: error: action class 'issue_refnd' is not named in policy v3 ({policy}), "
        "which refuses unknown action classes; known: issue_refund, send_email\n",
    )
    assert json_queue("countersign", redis).count == 0
    fixed = cli(*README_REQUEST, env=env)  # nothing was claimed: the same key is free for the fix
    assert fixed.returncode == 0, fixed.stderr
    drain(redis)
    assert client.get(fixed.stdout.strip()).status == "pending"

    # Without COUNTERSIGN_POLICY the command cannot know; the worker's intake refuses it instead.
    no_policy = {name: value for name, value in env.items() if name != "COUNTERSIGN_POLICY"}
    blind = cli(*typo, "--run-id", "r2", env=no_policy)
    assert blind.returncode == 0, blind.stderr
    drain(redis)
    state = client.get(blind.stdout.strip())
    assert state.status == "dead_letter" and "'issue_refnd' is not named in policy v3" in (state.reason or "")


def test_show_prints_a_queued_a_dead_lettered_and_a_stored_request_in_one_shape(
    env: dict[str, str], redis: Redis, client: ApprovalClient, capsys: pytest.CaptureFixture[str]
) -> None:
    """`show` of a request intake refused is the shape of a stored one (status `dead_letter`, the
    refusal in `reason`, the request's fields as sent, what intake never set null), not the kept
    intake message `{v, request_id, request}`; so is a request intake has not taken yet."""
    sent = refund(action="refund_twice", payload={"amount": "9.99", "currency": "GBP"}, run_id="r-dl")
    refused = client.request(sent)  # the client has no policy; intake refuses the class
    stored = client.request(refund(run_id="r-ok"))
    drain(redis)
    queued = client.request(refund(run_id="r-q"))  # not taken by intake: no worker runs

    def show(request_id: str) -> dict[str, Any]:
        assert main(["show", request_id]) == 0
        return dict(json.loads(capsys.readouterr().out))

    shapes = {
        name: show(request_id) for name, request_id in (("dead", refused), ("ok", stored), ("q", queued))
    }
    dead, ok = shapes["dead"], shapes["ok"]
    assert (dead["status"], ok["status"], shapes["q"]["status"]) == ("dead_letter", "pending", "queued")
    assert "'refund_twice' is not named in policy" in dead["reason"] and ok["reason"] is None
    for shown in shapes.values():
        assert list(shown) == list(ok) and list(shown["request"]) == list(ok["request"])
    assert {name: dead["request"][name] for name in sent} == sent
    assert [
        dead["request"][name] for name in ("payload_sha256", "channel", "approvers", "policy_version")
    ] == [None] * 4
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", dead["request"]["created_at"])


EXAMPLE_POLICY = str(Path(__file__).resolve().parents[1] / "examples" / "policy.yml")


def dry_run(request: str) -> subprocess.CompletedProcess[str]:
    return cli("policy", "check", EXAMPLE_POLICY, "--request", request)


def test_policy_check_dry_runs_a_request_through_the_policy() -> None:
    small = dry_run('{"action": "issue_refund", "payload": {"amount": "20.00"}}')
    assert small.returncode == 0, small.stderr
    lines = small.stdout.splitlines()
    assert lines[0].startswith(f"{EXAMPLE_POLICY}: policy version 1, sha256 ")
    assert lines[1:] == [
        'request: issue_refund from dry-run, payload {"amount": "20.00"}',
        "route: C0FINANCE (U0LEAD, U0ALICE; after 14400 s: escalate) → "
        "C0FINLEADS (S0FINLEADS; after 86400 s: deny)",
        "approvers: U0LEAD, U0ALICE",
        "quorum: 1",
        "auto-approved: yes, approved by policy with no card",
        "reviewers read: the auto-approval rule held: refunds under 50 are automatic",
        "rule: auto_approve: double(payload.amount) > 0.0 && double(payload.amount) < 50.0",
        "labels:",
        '  auto_approve: "refunds under 50 are automatic" for '
        "double(payload.amount) > 0.0 && double(payload.amount) < 50.0",
        '  require[0].when: "refunds from 10,000 need two approvers" for double(payload.amount) >= 10000.0',
        '  edit_rule: "a refund may be lowered, never raised" for '
        "double(edited.amount) <= double(original.amount)",
        "evaluation errors: none",
    ]
    large = dry_run(
        '{"action": "issue_refund", "payload": {"amount": "25000.00"}, "requester": "refund-agent"}'
    )
    assert "quorum: 2" in large.stdout and "auto-approved: no, reviewed by a human" in large.stdout
    assert "request: issue_refund from refund-agent" in large.stdout


def test_policy_check_reports_a_rule_that_cannot_be_evaluated_and_exits_zero(tmp_path: Path) -> None:
    """A payload without `amount`, under the example without its `editable` declaration (which would
    refuse it, as below), leaves the rules over `double(payload.amount)` unevaluable: they fail closed."""
    undeclared = tmp_path / "undeclared.yml"
    example = [line for line in Path(EXAMPLE_POLICY).read_text().splitlines(keepends=True)]
    kept = [line for line in example if not line.lstrip().startswith(("editable:", "edit_rule:"))]
    assert len(kept) == len(example) - 2
    undeclared.write_text("".join(kept))
    request = '{"action": "issue_refund", "payload": {"currency": "USD"}}'
    broken = cli("policy", "check", str(undeclared), "--request", request)
    assert broken.returncode == 0, broken.stderr
    assert "auto-approved: no, reviewed by a human" in broken.stdout and "quorum: 2" in broken.stdout
    assert (
        "reviewers read: the auto-approval rule could not be evaluated: refunds under 50 are automatic; "
        in broken.stdout
    )
    errors = next(line for line in broken.stdout.splitlines() if line.startswith("evaluation errors: "))
    assert errors == (
        "evaluation errors: auto_approve: KeyError: 'amount'; require[0].when: KeyError: 'amount'"
    )


@pytest.mark.parametrize(
    ("request_json", "status", "message"),
    [
        (
            '{"action": "issue_refnd", "payload": {}}',
            2,
            f"action class 'issue_refnd' is not named in policy v1 ({EXAMPLE_POLICY}), which refuses "
            "unknown action classes; known: delete_customer, issue_refund",
        ),
        ('{"action": "issue_refund"}', 2, "payload: required"),
        (
            '{"action": "issue_refund", "payload": {"currency": "USD"}}',
            2,
            "payload.amount: missing, but the policy's editable.amount of issue_refund (decimal, places 2, "
            'min 0.01) requires it: send a decimal string like "1234.56"',
        ),
        ('{"action": "issue_refund", "payload": {}, "colour": 1}', 2, "colour: unknown field"),
        ("[1]", 2, "request: should be a JSON object"),
        (
            '{"action": "issue_refund", "payload": {"amount": "fifty"}}',
            2,
            'payload.amount: "fifty" breaks the policy\'s editable.amount of issue_refund (decimal, '
            "places 2, min 0.01): enter a number like 1234.56 or 0.5: digits, with at most one point "
            "between them; no commas or exponents",
        ),
        ('{"action": ', 2, "--request is not valid JSON (Expecting value at character 11)"),
    ],
)
def test_policy_check_refuses_a_bad_request_in_one_line(request_json: str, status: int, message: str) -> None:
    result = dry_run(request_json)
    assert (result.returncode, result.stdout, result.stderr) == (
        status,
        "",
        f"countersign: error: {message}\n",
    )


def test_policy_check_of_a_broken_policy_with_a_request_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("version: 1\nactions:\n  refund:\n    auto_approve: {rule: 'payload.amount <'}\n")
    result = cli("policy", "check", str(bad), "--request", '{"action": "refund", "payload": {}}')
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith(f"countersign: policy error: {bad}: actions.refund.auto_approve.rule: ")
    assert len(result.stderr.splitlines()) == 1


def test_policy_check_refuses_a_misspelt_cel_function_naming_the_file_and_field(tmp_path: Path) -> None:
    """New-user trial, finding 3: `doubel(` is caught when the file is loaded, not only when a rule is
    evaluated (where it would fail closed on every request)."""
    typo = tmp_path / "typo.yml"
    example = Path(EXAMPLE_POLICY).read_text()
    assert "double(payload.amount) < 50.0" in example
    typo.write_text(example.replace("double(payload.amount) < 50.0", "doubel(payload.amount) < 50.0"))
    result = cli("policy", "check", str(typo))
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr == (
        f"countersign: policy error: {typo}: actions.issue_refund.auto_approve.rule: "
        "CEL has no function doubel (a typo?)\n"
    )


def test_request_with_a_webhook_needs_no_queue_and_show_names_it(
    env: dict[str, str], redis: Redis, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    env["COUNTERSIGN_WEBHOOK_SECRET"] = "whsec_" + base64.b64encode(bytes(32)).decode()
    monkeypatch.setenv("COUNTERSIGN_WEBHOOK_SECRET", env["COUNTERSIGN_WEBHOOK_SECRET"])
    flags = README_REQUEST[: README_REQUEST.index("--resume-queue")]  # the README's, resume flags last
    assert main([*flags, "--resume-webhook", "https://agent.example.com/decisions"]) == 0
    request_id = capsys.readouterr().out.strip()
    drain(redis)
    assert main(["show", request_id]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["request"]["resume"] == {"webhook": "https://agent.example.com/decisions"}
    result = cli(*flags, "--resume-webhook", "http://agent.example.com/decisions", env=env)
    assert result.returncode == 2 and "resume.webhook: should use https://" in result.stderr


def test_show_says_when_the_card_of_a_request_in_a_busy_channel_is_expected(
    env: dict[str, str], redis: Redis, client: ApprovalClient
) -> None:
    hold_channel(redis, "C0FINANCE", seconds=300)  # a flood's cards go first, one per 1.1 s
    request_id = client.request(refund())
    drain(redis)
    result = cli("show", request_id, env=env)
    assert result.returncode == 0, result.stderr
    card = json.loads(result.stdout)["card"]
    assert (card["channel"], card["ts"]) == ("C0FINANCE", None)
    assert 280 <= card["scheduled_in_seconds"] <= 300 and 255 <= card["cards_ahead"] <= 273
    assert card["expected"] == (
        f"card scheduled in {card['scheduled_in_seconds']} s, {card['cards_ahead']} cards ahead in C0FINANCE"
    )


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)  # the other database is a broken one
@pytest.mark.parametrize(("command", "broken"), CANNOT_START)
def test_a_command_that_cannot_start_says_why_in_one_line_and_exits_1_or_2(
    env: dict[str, str], sandbox: tuple[Sandbox, str], command: str, broken: str
) -> None:
    """Exit 1 for a database, Redis or Slack that does not answer (or a database not migrated), 2 for a
    setting that is wrong: one convention for every command (`cli.exit_status`)."""
    sandbox[0].bot_token = env["SLACK_BOT_TOKEN"]  # any other token is one Slack does not know
    closed = str(free_port())
    settings, expected = BROKEN[broken]
    broken_env = {name: value.format(closed=closed) for name, value in settings.items()}
    result = cli(
        *COMMANDS[command],
        env={**env, "PORT": str(free_port()), "SLACK_APP_TOKEN": "xapp-1", **broken_env},
    )
    assert result.returncode == (2 if broken in BAD_INPUT else 1), result.stderr
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
    assert (refused.returncode, refused.stdout) == (1, "")  # Redis does not answer: a run-time failure
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


def test_help_of_run_request_and_sandbox_names_their_settings_and_required_flags() -> None:
    run = cli("run", "--help")
    assert run.returncode == 0
    for text in ("No flag is required", "PORT", "REDIS_URL", "DATABASE_URL", "SLACK_BOT_TOKEN", ".run/.env"):
        assert text in run.stdout, text
    # Trial: with REDIS_URL unset a private Redis always starts, not only "when nothing answers".
    assert (
        "a private redis-server (with REDIS_URL unset always; with it\nset, when nothing answers there)"
        in (run.stdout)
    )
    sandbox = cli("sandbox", "--help")
    assert sandbox.returncode == 0
    for text in (
        "address to listen on",
        "port to listen on",
        "where clicks, modal submits",
        "print no start",
    ):
        assert text in sandbox.stdout, text
    assert "SLACK_SIGNING_SECRET  required" in sandbox.stdout
    request = cli("request", "--help")
    assert request.returncode == 0
    assert (
        "Required, as flags or as fields of --file: --action, --payload, --summary, --requester, --run-id "
        "and\n--step (or --idempotency-key). Where the decision goes: --resume-queue and --resume-func, or\n"
        "--resume-webhook, or neither (then read it with --wait, `countersign wait ID` or "
        "`countersign show ID`)." in request.stdout
    )
    # Every setting `countersign request` reads (trial: the policy and the webhook check were missing).
    settings = (
        "REDIS_URL",
        "DATABASE_URL",
        "COUNTERSIGN_POLICY",
        "COUNTERSIGN_WEBHOOK_ALLOW_HTTP",
        "COUNTERSIGN_CLI_REDIS_TIMEOUT_SECONDS",
    )
    for name in settings:
        assert f"\n  {name} " in request.stdout, name  # listed under "settings", not only mentioned
    for text in (".run/.env", "printed on stderr"):
        assert text in request.stdout, text
    assert "exit status: 0 sent (with --wait: decided), 1 a failure at run time" in request.stdout


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("broken", ["port in use", "bad token", "database"])
def test_make_run_that_cannot_start_says_why_in_one_line_and_exits_1_or_2(
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
    assert result.returncode == (1 if broken == "database" else 2), result.stderr
    assert result.stderr.startswith("countersign: error: " + expected), result.stderr
    assert len(result.stderr.splitlines()) == 1 and result.stdout == "", result.stderr
    assert not (tmp_path / ".run/.env").exists()  # nothing started, nothing to tell a second terminal


def test_request_refuses_a_payload_that_would_mislead_the_card_before_enqueueing(
    env: dict[str, str], redis: Redis, policy_file: Path
) -> None:
    decoy = '{"amount\\u200b": "10.00", "amount": "9000.00"}'  # issue 12: a decoy shown as `amount`
    result = cli(*README_REQUEST[:3], "--payload", decoy, *README_REQUEST[5:], env=env)
    assert (result.returncode, result.stdout, result.stderr) == (
        2,
        "",
        'countersign: error: payload: key payload."amount\\u200b" contains U+200B ZERO WIDTH SPACE, an '
        "invisible or look-alike character; rename it\n",
    )
    policy_file.write_text(policy_file.read_text().replace("reject_reason: required", "key_fields: [amount]"))
    nested = '{"currency": "USD", "refund": {"amount": "9000.00"}}'  # where the card cannot show it
    result = cli(*README_REQUEST[:3], "--payload", nested, *README_REQUEST[5:], env=env)
    assert (result.returncode, result.stderr) == (
        2,
        "countersign: error: payload.refund.amount: named like the key field amount of issue_refund but "
        "nested, where the card does not show it; send it as payload.amount\n",
    )
    assert json_queue("countersign", redis).count == 0


def test_request_refuses_money_sent_as_a_json_number_before_enqueueing(
    env: dict[str, str], redis: Redis
) -> None:
    """The tests' policy, as `examples/policy.yml`, makes `amount` an editable decimal with 2 places."""
    for number, shown in (("120.00", "120.0"), ("120", "120")):
        payload = f'{{"amount": {number}, "currency": "USD"}}'
        result = cli(*README_REQUEST[:3], "--payload", payload, *README_REQUEST[5:], env=env)
        assert (result.returncode, result.stdout, result.stderr) == (
            2,
            "",
            f"countersign: error: payload.amount: a decimal field of issue_refund, sent as the JSON number "
            f'{shown}; send it as a string like "120.00", so that money never passes through a float\n',
        )
    assert json_queue("countersign", redis).count == 0
    sent = cli(*README_REQUEST, env=env)
    assert sent.returncode == 0, sent.stderr


def test_show_prints_the_grant_signature_only_when_asked(
    env: dict[str, str], redis: Redis, client: ApprovalClient, policy_file: Path, store: Store
) -> None:
    policy_file.write_text(
        policy_file.read_text().replace("send_email: {}", "send_email: {auto_approve: 'true'}")
    )
    request_id = client.request(refund(action="send_email"))
    drain(redis)
    event = store.outbox_event(request_id)
    assert event is not None and len(signature := event.body["grant"]["signature"]) == 64
    shown = cli("show", request_id, env=env)
    assert shown.returncode == 0 and signature not in shown.stdout
    grant = json.loads(shown.stdout)["decision"]["grant"]
    assert grant["signature"] == "hidden (countersign show --with-grant prints it)"
    assert grant["payload_sha256"] == event.body["grant"]["payload_sha256"]
    asked = cli("show", request_id, "--with-grant", env=env)
    assert json.loads(asked.stdout)["decision"]["grant"]["signature"] == signature


def test_wait_prints_the_decision_and_exits_3_while_undecided_as_does_request_wait(
    env: dict[str, str], redis: Redis, runtime: Runtime, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = README_REQUEST[: README_REQUEST.index("--resume-queue")]  # no resume target: the shell waits
    assert main([*flags, "--wait", "0.2"]) == 3  # intake has not run: undecided
    out, err = capsys.readouterr()
    timed_out = re.search(
        r"countersign: error: request (\w{26}) is still undecided after 0.2 s; wait again", err
    )
    assert out == "" and timed_out is not None
    request_id = timed_out[1]
    drain(redis)
    waited = cli("wait", request_id, "--timeout", "0.2", env=env)
    assert (waited.returncode, waited.stdout) == (3, "")
    assert waited.stderr.endswith(f"request {request_id} is still undecided after 0.2 s; wait again later\n")

    lead = {"slack_user_id": "U0LEAD", "name": "lee"}
    decided = runtime.store.vote(request_id, lead, "approved", runtime.resume_event, refuse=anyone)
    assert relay.try_publish(runtime.redis, decided.event)  # type: ignore[union-attr]  # as a click does
    waited = cli("wait", request_id, "--timeout", "10", env=env)
    assert waited.returncode == 0, waited.stderr
    decision = json.loads(waited.stdout)
    assert (decision["request_id"], decision["outcome"]) == (request_id, "approved")
    assert decision["grant"]["signature"] == "hidden (countersign wait --with-grant prints it)"
    assert main([*flags, "--wait", "10", "--with-grant"]) == 0  # same key and payload: the same request
    again = json.loads(capsys.readouterr().out)
    assert again["request_id"] == request_id and len(again["grant"]["signature"]) == 64
    bad = cli("wait", request_id, "--timeout", "-1", env=env)
    assert bad.returncode == 2 and "'-1' is not a number of seconds, 0 or more" in bad.stderr
    at_once = cli("wait", request_id, "--timeout", "0", env=env)  # README: 0 or more, 0 looks once
    assert at_once.returncode == 0 and json.loads(at_once.stdout)["outcome"] == "approved", at_once.stderr


def test_show_of_any_id_names_an_unusable_database_and_creates_no_sqlite_file(tmp_path: Path) -> None:
    """New-user trial, finding 14: `show x` is not "no approval request 'x'" when the database is the
    problem, and a DATABASE_URL naming a SQLite file that does not exist leaves none behind."""
    missing = tmp_path / "typo.db"
    unreachable = f"postgresql+psycopg://nobody@127.0.0.1:{free_port()}/countersign"
    for url in (f"sqlite:///{missing}", unreachable):
        for request_id in ("x", "01KA0000000000000000000000"):
            result = cli("show", request_id, env={"DATABASE_URL": url, "REDIS_URL": "redis://127.0.0.1:1/0"})
            status = 1 if url == unreachable else 2  # it does not answer; the file named is not there
            assert (result.returncode, result.stdout) == (status, ""), result.stderr
            assert result.stderr.startswith("countersign: error: DATABASE_URL: "), result.stderr
    assert "no SQLite database at" in cli("show", "x", env={"DATABASE_URL": f"sqlite:///{missing}"}).stderr
    assert not missing.exists()


def test_request_refuses_a_payload_breaking_a_declared_field_before_enqueueing(
    env: dict[str, str], redis: Redis
) -> None:
    """Trial finding: `--payload '{"amount": "-5.00", ...}'` was sent on, needed one approver and
    ran. The tests' policy declares `amount: {type: decimal, places: 2, min: "0.01"}`."""
    declared = "editable.amount of issue_refund (decimal, places 2, min 0.01)"
    for amount, wrong in (("-5.00", "must be at least 0.01"), ("abc", "enter a number like 1234.56")):
        payload = json.dumps({"amount": amount, "currency": "USD"})
        result = cli(*README_REQUEST[:3], "--payload", payload, *README_REQUEST[5:], env=env)
        assert (result.returncode, result.stdout) == (2, ""), result.stderr
        assert result.stderr.startswith(
            f'countersign: error: payload.amount: "{amount}" breaks the policy\'s {declared}: {wrong}'
        ), result.stderr
        assert len(result.stderr.splitlines()) == 1
    assert json_queue("countersign", redis).count == 0


def _connections_to(port: int) -> int:
    """How many TCP connections to 127.0.0.1:`port` there are, the listening socket aside
    (`/proc/net/tcp`): one a stopped server's kernel took into its backlog counts, though the server
    never reads it."""
    rows = [row.split() for row in Path("/proc/net/tcp").read_text().splitlines()[1:]]
    return sum(1 for row in rows if row[1] == f"0100007F:{port:04X}" and row[3] != "0A")


def test_request_to_a_hung_redis_fails_within_the_cli_timeout_naming_redis_url(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Trial finding: with Redis frozen, `countersign request` sat ~11 s (the servers' 10 s read
    timeout) before failing. A command's Redis has `COUNTERSIGN_CLI_REDIS_TIMEOUT_SECONDS` (here 1 s)
    to answer: once connected, the command ends before the old 10 s could pass (however slowly it
    started on a busy machine), in one line naming REDIS_URL, exit 1 (a failure at run time)."""
    hung = RedisServer(tmp_path)
    hung.start()
    try:
        with hung.paused():  # SIGSTOP: the port accepts connections, nothing answers
            before = _connections_to(hung.port)  # the fixture's own client
            command = subprocess.Popen(
                [sys.executable, "-m", "countersign.cli", *README_REQUEST],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                cwd=NO_RUN_DIR,
                env={
                    "PATH": os.environ["PATH"],
                    **env,
                    "REDIS_URL": hung.url,
                    "COUNTERSIGN_CLI_REDIS_TIMEOUT_SECONDS": "1",
                },
            )
            try:
                reached = lambda: _connections_to(hung.port) > before or command.poll() is not None  # noqa: E731
                wait_for(reached, timeout=60, what="the command to reach Redis")
                # 1 s and an exit take far less than 8 s; the old 10 s read timeout cannot end before
                out, err = command.communicate(timeout=REDIS_TIMEOUT_SECONDS - 2)
            finally:
                command.kill()
    finally:
        hung.stop()
    assert (command.returncode, out) == (1, "")
    assert err.startswith(
        f"countersign: error: REDIS_URL: Redis does not answer at {hung.url} (from the environment) "
        "(Timeout reading from "
    ), err
    assert err.endswith("); start it, or set REDIS_URL to one that runs\n") and err.count("\n") == 1
