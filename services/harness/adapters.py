"""Agent adapters: one agent reply per call, or an `AgentError` saying why not.

- `http`: POST {"session_id", "message"} -> {"reply", "exit_reason", "session_id"?,
  "usage"?, "checks"?}; the first POST has session_id null.
- `openai_chat`: any OpenAI-compatible chat endpoint through the official client; the
  whole history each turn; a call of the `exit_tool` ends the conversation with its
  `exit_reason` argument; every tool call is recorded, never graded.
- `python`: "package.module:function", sync or async, called with the http request body
  (a dict) and returning the http reply body.

Every request names its trial (headers `X-Passk-Run-Id`, `X-Passk-Scenario-Id`,
`X-Passk-Trial-Id`; for python, the same under `passk` in the body) so a product can
correlate its logs with passk's trials.
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import os
import sys
from collections.abc import Callable
from typing import Any, Protocol

import aiohttp

from schemas.events import Message
from services.harness.domain import AgentError, AgentReply, PlannedTrial, parse_reply
from services.harness.target import HttpAgent, OpenAIChatAgent, PythonAgent


class AgentClient(Protocol):
    async def send(
        self,
        trial: PlannedTrial,
        run_id: str,
        session_id: str | None,
        message: str,
        history: list[Message],
    ) -> AgentReply: ...

    async def close(self) -> None:
        """Release what the client holds (a connection pool); most hold nothing."""


def trial_headers(trial: PlannedTrial, run_id: str) -> dict[str, str]:
    return {
        "X-Passk-Run-Id": run_id,
        "X-Passk-Scenario-Id": trial.scenario.id,
        "X-Passk-Trial-Id": trial.trial_id,
    }


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class HttpClient:
    def __init__(self, target: HttpAgent) -> None:
        self.target = target
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            # Timeouts are the runner's (one per reply), so none here.
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None), connector=aiohttp.TCPConnector(limit=0)
            )
        return self._session

    async def send(
        self,
        trial: PlannedTrial,
        run_id: str,
        session_id: str | None,
        message: str,
        history: list[Message],
    ) -> AgentReply:
        body = {"session_id": session_id, "message": message}
        headers = {**self.target.headers, **trial_headers(trial, run_id)}
        try:
            async with self._client().post(self.target.url, json=body, headers=headers) as response:
                raw = await response.content.read(self.target.max_reply_bytes + 1)
                if len(raw) > self.target.max_reply_bytes:
                    raise AgentError(
                        f"the reply is larger than {self.target.max_reply_bytes} bytes"
                    )
                text = raw.decode("utf-8", errors="replace")
                if response.status >= 400:
                    raise AgentError(
                        f"HTTP {response.status} from {self.target.url}: "
                        f"{_short(text) or response.reason}"
                    )
        except aiohttp.ClientConnectorError as exc:
            raise AgentError(f"cannot connect to {self.target.url}: {exc.os_error}") from None
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError) as exc:
            raise AgentError(
                f"{self.target.url} closed the connection before replying ({type(exc).__name__})"
            ) from None
        except aiohttp.ClientError as exc:
            raise AgentError(
                f"HTTP request to {self.target.url} failed: {type(exc).__name__}: {exc}"
            ) from None
        try:
            payload = json.loads(text)
        except json.JSONDecodeError:
            raise AgentError(f"the reply is not JSON: {_short(text, 80)!r}") from None
        return parse_reply(payload)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


class OpenAIChatClient:
    def __init__(self, target: OpenAIChatAgent) -> None:
        from openai import AsyncOpenAI

        self.target = target
        # Retries are the harness's business (none: a failed reply is an agent_error).
        self._client = AsyncOpenAI(
            base_url=target.base_url,
            api_key=os.environ.get(target.api_key_env) or "unset",
            max_retries=0,
        )
        self._tools = [
            {
                "type": "function",
                "function": {
                    "name": target.exit_tool,
                    "description": "End the conversation: the product closes it.",
                    "parameters": {
                        "type": "object",
                        "properties": {"exit_reason": {"type": "string"}},
                        "required": ["exit_reason"],
                    },
                },
            }
        ]

    async def send(
        self,
        trial: PlannedTrial,
        run_id: str,
        session_id: str | None,
        message: str,
        history: list[Message],
    ) -> AgentReply:
        import openai

        session = session_id or trial.trial_id  # the harness names the session here
        messages: list[dict[str, Any]] = []
        if self.target.system_prompt:
            messages.append({"role": "system", "content": self.target.system_prompt})
        messages += [m.model_dump(exclude_none=True) for m in history]
        try:
            response = await self._client.chat.completions.create(
                model=self.target.model,
                messages=messages,  # type: ignore[arg-type]
                tools=self._tools,  # type: ignore[arg-type]
                user=session,
                extra_headers={"X-Session-Id": session, **trial_headers(trial, run_id)},
            )
        except openai.APIStatusError as exc:
            raise AgentError(
                f"HTTP {exc.status_code} from {self.target.base_url}: {_short(str(exc.message))}"
            ) from None
        except openai.APIConnectionError as exc:
            raise AgentError(f"cannot reach {self.target.base_url}: {exc}") from None
        except openai.OpenAIError as exc:
            raise AgentError(f"{type(exc).__name__}: {_short(str(exc))}") from None
        if not response.choices:
            raise AgentError("the completion has no choices")
        choice = response.choices[0].message
        calls = [c.model_dump() for c in (choice.tool_calls or [])]
        exit_reason = None
        for call in calls:
            function = call.get("function") or {}
            if function.get("name") == self.target.exit_tool:
                try:
                    args = json.loads(function.get("arguments") or "{}")
                except json.JSONDecodeError:
                    args = {}
                exit_reason = str(args.get("exit_reason") or "product_closed")
        usage = response.usage.model_dump() if response.usage else None
        return AgentReply(
            reply=choice.content,
            exit_reason=exit_reason,
            session_id=session,
            usage=usage,
            tool_calls=calls or None,
        )

    async def close(self) -> None:
        await self._client.close()


def import_path() -> list[str]:
    """Where a `python` agent's module is looked for: the current directory first (as
    `python -m` does; the `passk` script alone would not look there), then PYTHONPATH,
    then the installed packages."""
    cwd = os.getcwd()
    return [cwd, *(p for p in sys.path if p not in ("", cwd))]


class PythonClient(AgentClient):
    def __init__(self, target: PythonAgent) -> None:
        module_name, _, name = target.callable.partition(":")
        path = import_path()
        if sys.path[:1] != path[:1]:
            sys.path.insert(0, path[0])
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            tried = ", ".join(path[:6]) + (", …" if len(path) > 6 else "")
            raise AgentError(
                f"cannot import {module_name}: {exc} (looked in: {tried}; run "
                "passk from the directory that holds it, or add that directory "
                "to PYTHONPATH)"
            ) from None
        function = getattr(module, name, None)
        if not callable(function):
            raise AgentError(f"{target.callable} is not a callable")
        self._function = function

    async def send(
        self,
        trial: PlannedTrial,
        run_id: str,
        session_id: str | None,
        message: str,
        history: list[Message],
    ) -> AgentReply:
        request = {
            "session_id": session_id,
            "message": message,
            "passk": {
                "run_id": run_id,
                "scenario_id": trial.scenario.id,
                "trial_id": trial.trial_id,
            },
        }
        try:
            if inspect.iscoroutinefunction(self._function):
                payload = await self._function(request)
            else:
                # A sync agent must not stall the other trials.
                payload = await asyncio.to_thread(self._function, request)
        except Exception as exc:  # the agent's own failure is its trial's agent_error
            raise AgentError(f"the agent raised {type(exc).__name__}: {_short(str(exc))}") from None
        return parse_reply(payload)


# The client of each kind of `agent:` a target file can give.
CLIENTS: dict[type, Callable[[Any], AgentClient]] = {
    HttpAgent: HttpClient,
    OpenAIChatAgent: OpenAIChatClient,
    PythonAgent: PythonClient,
}


def make_client(target: HttpAgent | OpenAIChatAgent | PythonAgent) -> AgentClient:
    return CLIENTS[type(target)](target)
