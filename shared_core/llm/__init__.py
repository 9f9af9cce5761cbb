"""The LLM layer: one protocol for any chat model, and the policy every call runs under.

- :class:`ChatModel`, :class:`Message`, :class:`Completion`: the protocol;
- :class:`StreamingChatModel`: a model that streams its reply (text deltas, then usage);
- :class:`OpenAIChat`: any OpenAI-compatible server through the ``openai`` client;
- :class:`LLMRunner`, :class:`RetryPolicy`: retries, timeouts, concurrency, progress;
- :class:`TokenLedger`: tokens per stage, server-reported or counted;
- :func:`estimate_cost`, :class:`ModelPrice`: the cost before, checked after.
"""

from .ledger import StageUsage, TokenLedger
from .messages import (
    BadOutput,
    ChatModel,
    Completion,
    LLMError,
    Message,
    StreamingChatModel,
    StreamPart,
    reply_text,
)
from .openai_chat import OpenAIChat, StreamCut
from .pricing import (
    DEFAULT_OUTPUT_RATIO,
    PRICES,
    CostEstimate,
    EstimateCheck,
    ModelPrice,
    estimate_cost,
    price_for,
)
from .runner import (
    LLMRunner,
    Outcome,
    RequestFailed,
    RetryPolicy,
    is_transient,
    iterate_sync,
    run_sync,
)
from .usage import completion_with_usage, counted_input_tokens, message_tokens

__all__ = [
    "DEFAULT_OUTPUT_RATIO",
    "PRICES",
    "BadOutput",
    "ChatModel",
    "Completion",
    "CostEstimate",
    "EstimateCheck",
    "LLMError",
    "LLMRunner",
    "Message",
    "ModelPrice",
    "OpenAIChat",
    "Outcome",
    "RequestFailed",
    "RetryPolicy",
    "StageUsage",
    "StreamCut",
    "StreamPart",
    "StreamingChatModel",
    "TokenLedger",
    "completion_with_usage",
    "counted_input_tokens",
    "estimate_cost",
    "is_transient",
    "iterate_sync",
    "message_tokens",
    "price_for",
    "reply_text",
    "run_sync",
]
