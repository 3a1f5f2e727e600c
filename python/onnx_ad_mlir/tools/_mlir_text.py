"""Checks of MLIR text that the parser would answer with a process abort.

MLIR 22's parser asserts (an assertions build: the process aborts) when a
resource entry in the file-metadata section `{-# ... #-}` has no complete
value token: `{-# dialect_resources: { builtin: { w: "0x08` (a truncated
file) or `... { w: ` at the end of the file. Such text is refused with a
message before it reaches the parser. Resource values are strings (hex blobs
included) or booleans; anything else the parser reports itself.
"""
from __future__ import annotations

import re

# A complete string literal, a line comment, the metadata opener, or an
# unterminated string (after which the parser reports the body's error).
# Strings are matched run by run, not character by character: a weight's hex
# blob is megabytes long (resnet18's 93 MB of text took 9.6 s, now 0.4 s).
_STRING = r'"[^"\\\n]*(?:\\.[^"\\\n]*)*"'
_BODY = re.compile(_STRING + r'|//[^\n]*|\{-#|"')
_TOKEN = re.compile(r'\s*(?:(' + _STRING + r')|(#-\}|[{}:,])|([A-Za-z_][\w$.\-]*)|(\S))')


def resource_problem(text: str) -> tuple[int, int, str] | None:
    """(line, column, what) of what in `text`'s file-metadata section would
    abort the parser; None when nothing would."""
    start = None
    for m in _BODY.finditer(text):
        token = m.group()
        if token == '"':
            return None
        if token == "{-#":
            start = m.end()
            break
    if start is None:
        return None
    depth, pos, key, prev = 0, start, None, None
    while True:
        m = _TOKEN.match(text, pos)
        if m is None:  # only whitespace left
            return _where(text, pos, "the file metadata ends before '#-}'") \
                if key is not None else None
        string, punct, ident, other = m.groups()
        pos = m.end()
        if key is not None and depth == 2:  # a resource entry's value
            if string is None and ident not in ("true", "false"):
                return _where(text, m.start(m.lastindex),
                              f"resource '{key}' has no complete value "
                              "(a string or true/false)")
            key = None
            continue
        if punct == "{":
            depth += 1
        elif punct == "}":
            depth -= 1
        elif punct == "#-}":
            return None
        elif punct == ":" and depth == 2 and prev is not None:
            key = prev
        prev = (string or ident) if punct != ":" else None
        if other is not None:
            return None  # the parser reports it (not a resource value)


def _where(text: str, pos: int, what: str) -> tuple[int, int, str]:
    line_start = text.rfind("\n", 0, pos) + 1
    return text.count("\n", 0, pos) + 1, pos - line_start + 1, what
