"""The app's log: one logger, and redaction of anything that looks like a secret before it is written."""

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


class RedactSecrets(logging.Filter):
    """Redacts the whole formatted record: message, arguments, traceback and stack."""

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = redact(record.getMessage()), ()
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:  # the handler's formatter prints exc_text as it is
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


class RedactingStream(io.TextIOBase):
    """stdout/stderr for the server: what anything prints (Gradio prints a refused call's inputs) is redacted and
    each write is cut to ``MAX_WRITE`` characters, so no secret and no megabyte of user input reaches the log;
    written through at each line end (a log file would otherwise get stdout in blocks, late)."""

    MAX_WRITE = 4_000

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        shown = text if len(text) <= self.MAX_WRITE else \
            f"{text[: self.MAX_WRITE]}… [{len(text) - self.MAX_WRITE:,} characters cut]\n"
        self.stream.write(redact(shown))
        if "\n" in shown:  # line by line, as a terminal shows it: a log file is never hours behind
            self.stream.flush()
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False
