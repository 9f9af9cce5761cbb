"""Answering with streaming, HuixiangDou2's way: logic form first, dual-level retrieval as fallback.

- :class:`AnswerPipeline` (:class:`AnswerConfig`): the multi-stage pipeline;
  ``stream``/``astream`` give the answer as it comes, with its
  :class:`AnswerTrace` (every stage, its output, tokens and time);
- :class:`DualLevelRetriever`: low-level keys (entities, concepts) against the
  concept index and KG entities, high-level keys (themes, relations) against
  KG relations and concept neighbourhoods, each key budgeted, each piece of
  :class:`Evidence` saying which level and key found it;
- :class:`LogicForm`: the query as operator steps (:data:`OPERATORS`), run in
  order, arithmetic and comparisons by :func:`evaluate`, never by the LLM;
- :func:`precheck`: are the arguments there, before answering.
"""

from .arithmetic import ExpressionError, evaluate, first_number, format_value
from .dual_level import DualLevelResult, DualLevelRetriever, KeyContext
from .evidence import Evidence, Level, Source
from .keys import QueryKeys, extract_keys, graph_keys, parse_keys
from .logic_form import (
    OPERATORS,
    LogicForm,
    LogicFormError,
    LogicFormResult,
    Operator,
    Step,
    StepResult,
    parse_steps,
)
from .pipeline import (
    Answer,
    AnswerConfig,
    AnswerPipeline,
    AnswerStream,
    AsyncAnswerStream,
    PreparedAnswer,
)
from .trace import AnswerTrace, QueryLedger, Route, StageRecord
from .verify import Verdict, parse_verdict, precheck

__all__ = [
    "OPERATORS",
    "Answer",
    "AnswerConfig",
    "AnswerPipeline",
    "AnswerStream",
    "AnswerTrace",
    "AsyncAnswerStream",
    "DualLevelResult",
    "DualLevelRetriever",
    "Evidence",
    "ExpressionError",
    "KeyContext",
    "Level",
    "LogicForm",
    "LogicFormError",
    "LogicFormResult",
    "Operator",
    "PreparedAnswer",
    "QueryKeys",
    "QueryLedger",
    "Route",
    "Source",
    "StageRecord",
    "Step",
    "StepResult",
    "Verdict",
    "evaluate",
    "extract_keys",
    "first_number",
    "format_value",
    "graph_keys",
    "parse_keys",
    "parse_steps",
    "parse_verdict",
    "precheck",
]
