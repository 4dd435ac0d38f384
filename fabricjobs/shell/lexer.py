"""Syntax highlighting from the grammar's own tokens (:func:`fabricjobs.commands.lex`)."""

from __future__ import annotations

from prompt_toolkit.document import Document
from prompt_toolkit.lexers import Lexer
from prompt_toolkit.styles import Style

from ..commands import lex

STYLE = Style.from_dict(
    {
        "keyword": "bold ansiblue",
        "param": "ansicyan",
        "type": "bold ansimagenta",
        "string": "ansigreen",
        "number": "ansiyellow",
        "punct": "",
        "comment": "italic ansibrightblack",
        "word": "",
        "error": "ansired",
        "prompt": "bold",
        "continuation": "ansibrightblack",
        "bottom-toolbar": "noreverse ansibrightblack",
    }
)


class CommandLexer(Lexer):
    def lex_document(self, document: Document):
        text = document.text
        spans = lex(text)
        lines = document.lines
        starts = []
        pos = 0
        for line in lines:
            starts.append(pos)
            pos += len(line) + 1

        def get_line(lineno: int):
            begin, line = starts[lineno], lines[lineno]
            end = begin + len(line)
            out, cursor = [], begin
            for s, e, cat in spans:
                if e <= begin or s >= end:
                    continue
                s, e = max(s, begin), min(e, end)
                if s > cursor:
                    out.append(("", text[cursor:s]))
                out.append((f"class:{cat}", text[s:e]))
                cursor = e
            if cursor < end:
                out.append(("", text[cursor:end]))
            return out

        return get_line
