"""The app's log: one logger; redaction of anything that looks like a secret, and escaping of control characters,
before anything is written."""

from __future__ import annotations

import io
import logging
import re

logger = logging.getLogger("gcs.app")


_SECRET = re.compile(
    r"hf_[A-Za-z0-9]{16,}"
    r"|\bBearer\s+[^\s\"',;]+"
    r"|[\"']?\b[\w-]*(?:token|api[_-]?key|password|passwd|secret|authorization)[\"']?\s*[=:]\s*"
    r"(?:(?:Bearer|Basic|token)\s+)?(?:\"[^\"]*\"|'[^']*'|[^\s,;}]+)",
    re.IGNORECASE,
)


def redact(text: str) -> str:
    """Hide anything that looks like a token or password before it reaches a log.

    >>> redact('HF_TOKEN=abc {"token": "x y"} Authorization: Bearer eyJ.z api_key=1')
    '[redacted] {[redacted]} [redacted] [redacted]'
    """
    return _SECRET.sub("[redacted]", text)


# What a terminal or a log viewer acts on: C0 and C1 controls and DEL (a newline starts a forged record, a carriage
# return overwrites a line, ESC [2J clears the screen), Unicode's line and paragraph separators, and bidirectional
# overrides and isolates (they reorder what is shown).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def escape_controls(text: str, keep: str = "") -> str:
    r"""``text`` with every control character but those in ``keep`` written as a visible escape.

    >>> escape_controls("tool 'x\n2026 gcs.app ERROR forged\x1b[2J'")
    "tool 'x\\n2026 gcs.app ERROR forged\\x1b[2J'"
    >>> escape_controls("line 1\nline 2\r", keep="\n")
    'line 1\nline 2\\r'
    """
    return _CONTROL.sub(lambda found: found[0] if found[0] in keep else ascii(found[0])[1:-1], text)


class RedactSecrets(logging.Filter):
    """Redacts the whole formatted record (message, arguments, traceback and stack) and escapes its control
    characters, whichever logger wrote it (the app's, Gradio's, ``mcp``'s): a message is one line, so nothing a
    client sends (a tool name with a newline and escape codes) can forge a record or drive the terminal; a
    traceback keeps its line breaks."""

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = escape_controls(redact(record.getMessage())), ()
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:  # the handler's formatter prints exc_text as it is
            record.exc_text = escape_controls(redact(record.exc_text), keep="\n")
        if record.stack_info:
            record.stack_info = escape_controls(redact(record.stack_info), keep="\n")
        return True


class RedactingStream(io.TextIOBase):
    """stdout/stderr for the server: what anything prints (Gradio prints a refused call's inputs and tracebacks,
    uvicorn logs through handlers of its own) is redacted, its control characters but line breaks and tabs escaped,
    and each write cut to its first ``HEAD`` and last ``TAIL`` characters, so no secret, no escape code and no
    megabyte of user input reaches the log, while a long traceback keeps its last line (the error itself); written
    through at each line end (a log file would otherwise get stdout in blocks, late)."""

    HEAD, TAIL = 3_000, 1_000

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        shown = redact(text)
        if len(shown) > self.HEAD + self.TAIL:
            cut = len(shown) - self.HEAD - self.TAIL
            shown = f"{shown[: self.HEAD]}… [{cut:,} characters cut] …{shown[-self.TAIL:]}"
        self.stream.write(escape_controls(shown, keep="\n\t"))
        if "\n" in shown:  # line by line, as a terminal shows it: a log file is never hours behind
            self.stream.flush()
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False
