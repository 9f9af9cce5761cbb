"""The protocol's data: messages are checked, completions say what they are, reply_text
turns an unusable reply into a BadOutput with a stable kind."""

from __future__ import annotations

import pytest

from shared_core.llm import BadOutput, ChatModel, Completion, LLMError, Message, reply_text
from shared_core.llm.messages import check_messages
from tests.shared_core.llm.scripted import ScriptedChat


def test_message_roles_and_content_are_checked() -> None:
    assert Message("assistant", "").content == ""
    with pytest.raises(ValueError, match="role must be system, user or assistant, got 'tool'"):
        Message("tool", "x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="message content must be str, got bytes"):
        Message("user", b"x")  # type: ignore[arg-type]


def test_check_messages() -> None:
    msgs = [Message("system", "s"), Message("user", "u")]
    assert check_messages(msgs) == tuple(msgs)
    assert check_messages(tuple(msgs)) == tuple(msgs)
    with pytest.raises(ValueError, match="must not be empty"):
        check_messages([])
    for not_a_sequence in ("hello", b"hello", None, iter(msgs)):
        with pytest.raises(TypeError, match="must be a sequence of Message"):
            check_messages(not_a_sequence)


def test_completion_defaults_and_truncation() -> None:
    c = Completion("hi", 5, 1)
    assert (c.cached_tokens, c.usage_from, c.finish_reason, c.refusal, c.model) == (
        0, "server", None, None, "")
    assert not c.truncated
    assert Completion("h", 5, 1, finish_reason="length").truncated
    assert not Completion("h", 5, 1, finish_reason="stop").truncated


@pytest.mark.parametrize("completion, kind, detail", [
    (Completion("", 1, 0, finish_reason="stop"), "empty", "finish_reason='stop'"),
    (Completion(" \n\t", 1, 3, finish_reason="length"), "empty", "finish_reason='length'"),
    (Completion("", 1, 0), "empty", "finish_reason=None"),
    (Completion("", 1, 4, refusal="I can't."), "refusal", "I can't."),
    # a refusal wins over any text, and is cut to 200 characters
    (Completion("partial", 1, 4, refusal="no " * 100), "refusal", ("no " * 100)[:200]),
])
def test_reply_text_rejects_unusable_replies(completion: Completion, kind: str,
                                             detail: str) -> None:
    with pytest.raises(BadOutput) as bad:
        reply_text(completion)
    assert (bad.value.kind, bad.value.detail) == (kind, detail)
    assert str(bad.value) == f"{kind}: {detail}"


def test_reply_text_keeps_the_text_as_it_is() -> None:
    assert reply_text(Completion("  Paris.\n", 1, 2)) == "  Paris.\n"


def test_error_types() -> None:
    assert issubclass(BadOutput, ValueError) and issubclass(LLMError, RuntimeError)


def test_the_protocol_is_checkable_at_runtime() -> None:
    assert isinstance(ScriptedChat([]), ChatModel)
    assert not isinstance("gpt-4o-mini", ChatModel)

    class NoAsync:
        model_name = "x"

        def complete(self) -> None: ...

    assert not isinstance(NoAsync(), ChatModel)
