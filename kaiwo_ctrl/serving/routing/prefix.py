"""The prompt prefix PrefixHash hashes, per route.

* chat completions: the first message whose role is ``user`` -- its string
  content, or the ``text`` of all its content parts joined;
* completions: ``prompt`` when it is a string, or its first element when it is
  a list of strings (token-id prompts give no prefix);
* responses (KubeAI 0.23, #667): ``input`` when it is a string, else the first
  item of the ``input`` list whose role is ``user``, read as a chat message
  (string content, or its parts' ``text`` joined: ``input_text`` parts and
  upstream's ``text`` ones alike); items without a role (tool outputs,
  references to earlier responses) are passed over;
* every other route: no prefix.

The prefix is cut to ``length`` characters (code points). With no prefix all
requests of a Model (and adapter) share one key, so they go to one home
endpoint until it exceeds the load bound.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _chat(body: Mapping[str, Any]) -> str:
    return _first_user_text(body.get("messages"))


def _responses(body: Mapping[str, Any]) -> str:
    given = body.get("input")
    return given if isinstance(given, str) else _first_user_text(given)


def _first_user_text(messages: Any) -> str:
    if not isinstance(messages, list):
        return ""
    for m in messages:
        if not isinstance(m, Mapping) or m.get("role") != "user":
            continue
        content = m.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "".join(p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str))
        return ""
    return ""


def _completion(body: Mapping[str, Any]) -> str:
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[0], str):
        return prompt[0]
    return ""


_EXTRACTORS = {"chat/completions": _chat, "completions": _completion, "responses": _responses}


def extract_prefix(route: str, body: Mapping[str, Any], length: int) -> str:
    """``route`` is the path after ``/v1/`` (``chat/completions``, ``completions``, ...)."""
    fn = _EXTRACTORS.get(route)
    if fn is None or length <= 0:
        return ""
    return fn(body)[:length]
