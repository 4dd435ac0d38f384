"""Key bindings: Enter runs the input once it ends with ';' (or is a bare shell word such as
``exit``); otherwise it starts a new line, so a statement can span lines. Ctrl-C drops the
input, Ctrl-D on an empty line leaves. During a history search (Ctrl-R), Enter is
prompt_toolkit's own: it puts the match in the input."""

from __future__ import annotations

from prompt_toolkit.filters import is_searching
from prompt_toolkit.key_binding import KeyBindings

from ..commands import lex
from .help import SHELL_WORDS, help_text


def input_complete(text: str) -> bool:
    stripped = text.strip()
    if not stripped or stripped.lower().rstrip(";") in SHELL_WORDS or help_text(text) is not None:
        return True  # (help <statement> too, as its banner says: it needs no ';')
    spans = [s for s in lex(text) if s[2] != "comment"]
    if not spans:
        return False
    s, e, cat = spans[-1]
    return cat == "punct" and text[s:e] == ";"


def key_bindings() -> KeyBindings:
    kb = KeyBindings()

    @kb.add("enter", filter=~is_searching)  # (while Ctrl-R searches, Enter takes the match it found)
    def _(event):
        buffer = event.current_buffer
        if buffer.complete_state is not None and buffer.complete_state.current_completion:
            buffer.apply_completion(buffer.complete_state.current_completion)
        elif input_complete(buffer.text):
            buffer.validate_and_handle()
        else:
            buffer.newline(copy_margin=False)

    return kb
