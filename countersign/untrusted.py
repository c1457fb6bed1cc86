"""How countersign shows text it did not write (an agent's payload and summary, a reviewer's reason,
a webhook's or a model's answer) wherever a person reads it: the one table of characters such text
may not show raw (`UNSAFE`), and the ways to show it.

- `sanitize`: lossy, each `UNSAFE` character as U+FFFD, for text a reviewer or operator only reads
  (cards, modals, the CLI's tables);
- `one_line`: line breaks as "⏎", so it cannot start what looks like another field or line;
- `escaped`: every control character and line break as `\\uXXXX`, for an error or log line (the
  HTTP API's errors, the CLI's `countersign: error:` line, `LogFormatter`): one line, and what was
  there stays readable;
- `json_text`: JSON with the same escapes, parsing back to exactly the data (Details, the CLI's JSON).

Imports nothing of ours, so every package may use it.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

# The one table of characters untrusted text may not show raw: bidirectional overrides and isolates,
# and the marks that steer them (LRM, RLM, ALM), can make text display in another order than it is
# stored ("Trojan Source", CVE-2021-42574); the C0 and C1 controls (but tab, LF and CR), DEL among
# them, have no business on a card or a terminal (ESC and CSI start terminal escape sequences).
UNSAFE = frozenset(
    [
        *range(0x00, 0x09),
        0x0B,
        0x0C,
        *range(0x0E, 0x20),
        *range(0x7F, 0xA0),
        *range(0x202A, 0x202F),
        *range(0x2066, 0x206A),
        0x200E,
        0x200F,
        0x061C,
    ]
)
_REPLACED = dict.fromkeys(UNSAFE, "\ufffd")

# Every character that ends a line or paragraph somewhere (`str.splitlines`' set: LF, VT, FF, CR,
# the file/group/record separators, NEL, and Unicode's line and paragraph separators).
LINE_BREAKS = "\n\v\f\r\x1c\x1d\x1e\x85\u2028\u2029"
NEWLINE_MARK = "⏎"
_MARKED = str.maketrans(dict.fromkeys(LINE_BREAKS, NEWLINE_MARK))
_SPACES = re.compile(r"[^\S\n]{2,}")

# `escaped`'s table: every `UNSAFE` character, line break and tab. Inside strings JSON escapes every
# character below U+0020 itself, and the only raw ones left in its output are the newlines of its
# indentation: `json_text` leaves those.
_ESCAPES = {c: f"\\u{c:04x}" for c in UNSAFE.union(map(ord, LINE_BREAKS + "\t"))}
_JSON_ESCAPES = {c: text for c, text in _ESCAPES.items() if c >= 0x20}


def sanitize(text: str) -> str:
    """`text` with every `UNSAFE` character (controls, bidirectional overrides) replaced by U+FFFD:
    lossy, for text a reviewer or operator only reads (cards, modals, the CLI's tables)."""
    return text.translate(_REPLACED)


def one_line(text: str) -> str:
    """`text` as one line, so that agent text on a card cannot start what looks like another field
    or push the rest of the card down: every line break (`LINE_BREAKS`, or CRLF) shown as one "⏎",
    and every run of other white space as one space. Never longer than `text`."""
    return _SPACES.sub(" ", text.replace("\r\n", "\n").translate(_MARKED))


def escaped(text: str) -> str:
    """`text` for an error or log line: every `UNSAFE` character, line break and tab written
    `\\uXXXX` (`"a\\x1b[2J\\u202eb"` → `a\\u001b[2J\\u202eb`), so it is one line that shows in its
    stored order and shows what was there. Applying it twice changes nothing more."""
    return text.translate(_ESCAPES)


def json_text(data: Any, indent: int | None = 2) -> str:
    """`data` as JSON (pretty, `indent` spaces; None: one line) for a modal or a terminal, every
    `UNSAFE` character and line break that JSON leaves raw (DEL, the C1 controls with NEL,
    bidirectional overrides and marks, U+2028/2029) escaped as `\\uXXXX`: a string value stays
    visibly one string in its stored order, and the text parses back to exactly `data` (a signed
    payload still verifies). Values JSON has no type for (datetimes, …) are written as `str` gives them."""
    return json.dumps(data, indent=indent, ensure_ascii=False, default=str).translate(_JSON_ESCAPES)


class LogFormatter(logging.Formatter):
    """A log line whose message is `escaped` (a logged reason, webhook answer or command text is
    one line, and cannot start a line that looks like another record); a traceback keeps its lines,
    each with its controls escaped."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return escaped(super().formatMessage(record))

    def formatException(self, ei: Any) -> str:
        return _lines(super().formatException(ei))

    def formatStack(self, stack_info: str) -> str:
        return _lines(super().formatStack(stack_info))


def _lines(text: str) -> str:
    return "\n".join(escaped(line) for line in text.split("\n"))


def log_to_stderr(level: int = logging.INFO) -> None:
    """Log countersign's processes to stderr, `<time> <logger> <level> <message>`, each line
    through `LogFormatter` (`logging.basicConfig`: nothing changes where a handler is set already)."""
    handler = logging.StreamHandler()
    handler.setFormatter(LogFormatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])
