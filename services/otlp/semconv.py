"""The OpenTelemetry GenAI semantic conventions passk reads, pinned.

Pinned to GenAI semantic conventions **v1.37.0** (the schema URL
`opentelemetry-util-genai` 1.3b0 / `opentelemetry-semantic-conventions` 0.66b2 write,
`https://opentelemetry.io/schemas/1.37.0`): `gen_ai.input.messages`,
`gen_ai.output.messages` and `gen_ai.system_instructions` as JSON arrays of
`{role, parts: [{type: text|tool_call|tool_call_response, ...}]}`. The per-message
events of v1.30.0 (`gen_ai.user.message`, `gen_ai.choice`, ...) are also read when a
chat span carries them as span events. Attribute names are spelled here once.
"""

from __future__ import annotations

SEMCONV_VERSION = "1.37.0"

OPERATION = "gen_ai.operation.name"
INVOKE_AGENT = "invoke_agent"
EXECUTE_TOOL = "execute_tool"
CHAT_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})

INPUT_MESSAGES = "gen_ai.input.messages"
OUTPUT_MESSAGES = "gen_ai.output.messages"
SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
INPUT_TOKENS = "gen_ai.usage.input_tokens"
OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
CONVERSATION_ID = "gen_ai.conversation.id"
SESSION_ID = "session.id"
AGENT_VERSION = "gen_ai.agent.version"
SERVICE_VERSION = "service.version"

TOOL_NAME = "gen_ai.tool.name"
TOOL_CALL_ID = "gen_ai.tool.call.id"
TOOL_CALL_ARGUMENTS = "gen_ai.tool.call.arguments"
TOOL_CALL_RESULT = "gen_ai.tool.call.result"

# v1.30.0 per-message events (as span events), role by event name.
MESSAGE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
CHOICE_EVENT = "gen_ai.choice"

# passk's own attributes (span or resource).
RUN_ID = "passk.run_id"
SCENARIO_ID = "passk.scenario_id"
TRIAL_ID = "passk.trial_id"
EXIT_REASON = "passk.exit_reason"
SESSION_STATE = "passk.session.state"
PASSK_AGENT_VERSION = "passk.agent_version"

# What passk writes back (evaluation events).
EVALUATION_EVENT = "gen_ai.evaluation.result"
EVALUATION_NAME = "gen_ai.evaluation.name"
EVALUATION_LABEL = "gen_ai.evaluation.score.label"
EVALUATION_VALUE = "gen_ai.evaluation.score.value"
EVALUATION_EXPLANATION = "gen_ai.evaluation.explanation"
