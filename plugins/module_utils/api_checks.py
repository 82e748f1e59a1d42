# Copyright: vllmops.cluster contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What readiness asks the API beyond a completion, and how the answer must
look: one chat request with a tool (a server with a tool-call parser), one
embedding (an embedding model, which serves no completions)."""

from __future__ import annotations

TOOL_HINT = ("vLLM refused or mangled a request with tools: check --tool-call-parser and --enable-auto-tool-choice (both are "
             "needed), and that the chat template renders tools (--chat-template); image_probe lists the parsers the image has")


def tool_request(model: str) -> dict:
    """A chat request a client with tools sends: one function, the server chooses (tool_choice auto)."""
    return {
        "model": model,
        "messages": [{"role": "user", "content": "What is the weather in Paris? Use the tool."}],
        "tools": [{"type": "function", "function": {
            "name": "get_weather", "description": "The current weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
        "tool_choice": "auto",
        "max_tokens": 32,
    }


def tool_reply_problem(reply) -> str:
    """'' when reply is a chat completion in the OpenAI protocol's shape (a message with text content or tool
    calls, each a function with a name and JSON arguments as a string); else what is wrong."""
    choices = reply.get("choices") if isinstance(reply, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return "the reply has no choices"
    message = choices[0].get("message")
    if not isinstance(message, dict):
        return "the first choice has no message"
    if message.get("content") is not None and not isinstance(message.get("content"), str):
        return "the message's content is neither text nor null"
    calls = message.get("tool_calls")
    if calls is None:
        calls = []
    if not isinstance(calls, list):
        return "tool_calls is not a list"
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) \
                or not isinstance(function.get("arguments"), str):
            return f"a tool call is not a function with a name and string arguments: {str(call)[:200]}"
    if message.get("content") is None and not calls:
        return "the message has neither content nor tool calls"
    return ""


def embedding_reply_problem(reply) -> str:
    """'' when reply is an embeddings response with one vector of numbers; else what is wrong."""
    data = reply.get("data") if isinstance(reply, dict) else None
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        return "the reply has no data"
    vector = data[0].get("embedding")
    if not isinstance(vector, list) or not vector or not all(isinstance(x, (int, float)) for x in vector):
        return "the first embedding is not a list of numbers"
    return ""
