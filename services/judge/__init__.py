"""The judge processor: binary judges (LLM and deterministic) grading each finished conversation.

Modules (the judge kinds live in `services.grading.kinds`): `prompt` (the judge prompt and
answer parsing), `client` (the async OpenAI-compatible client with retries and the outage
gate), `cache` (verdicts by model, prompt hash, assertion, transcript hash), `domain`
(verdict building), `grading` (one trial's judges, bounded and concurrent), `metrics`, `app`
(Faust wiring), `standin` (the offline stand-in judge server) and `commands`
(`passk judge-standin`).
"""
