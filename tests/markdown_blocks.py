"""The fenced code blocks of the project's Markdown pages, for the docs test and the wheel check.

A block is run by a test unless the line before its fence is an HTML comment that says why not
(``<!-- illustrative: ... -->``; the comment is invisible on the rendered page), or the README's test command
(``<!-- test-command -->``: CI runs it, ``.ci/run``).

    python tests/markdown_blocks.py README.md "As a library"    # prints the first block under that heading

>>> page = "# A\\n\\n<!-- illustrative: output -->\\n```json\\n{}\\n```\\n## B\\n```python\\nx = 1\\n```\\n"
>>> [(b.heading, b.language, b.code, b.illustrative) for b in parse(page)]
[('A', 'json', '{}\\n', 'output'), ('B', 'python', 'x = 1\\n', None)]
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = ("README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")))
ILLUSTRATIVE = re.compile(r"<!--\s*illustrative:\s*(.+?)\s*-->")
TEST_COMMAND, TEST_COMMAND_WHY = "<!-- test-command -->", "the test command: CI runs it (.ci/run)"


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # of the opening fence, 1-based
    heading: str  # the nearest heading above it
    language: str
    code: str
    illustrative: str | None  # why it is not run, or None

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def parse(text: str, page: str = "") -> list[Block]:
    """Every fenced block of a Markdown ``text``, in order."""
    blocks, heading, lines = [], "", text.splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        fence = re.match(r"^```(\w*)\s*$", line)
        if fence:
            end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith("```"))
            before = lines[index - 1] if index else ""
            marker = ILLUSTRATIVE.search(before)
            why = marker.group(1) if marker else TEST_COMMAND_WHY if before.strip() == TEST_COMMAND else None
            code = "".join(f"{s}\n" for s in lines[index + 1 : end])
            blocks.append(Block(page, index + 1, heading, fence.group(1), code, why))
            index = end
        index += 1
    return blocks


def page_blocks(page: str) -> list[Block]:
    return parse((ROOT / page).read_text(encoding="utf-8"), page)


def all_blocks() -> list[Block]:
    return [block for page in PAGES for block in page_blocks(page)]


if __name__ == "__main__":
    page, heading = sys.argv[1], sys.argv[2]
    print(next(b.code for b in page_blocks(page) if b.heading == heading), end="")
