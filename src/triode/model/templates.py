"""Chat-template hygiene: the roles a model's template refuses, and messages that fit it.

Clients send `developer` messages (the Responses API's instructions role) and system
messages in the middle of a conversation (Codex, the Agents SDK); many templates raise on
one or the other (Gemma's "roles must alternate", Mistral's "only an initial optional system
message", templates that know no `developer`). Which ones a template refuses is found once,
when the model loads (`probe_roles`: a template that raises on such a conversation and not on
the same one without it refuses it), and every render then fits its messages to the template
(`fit_roles`), as docs/models.md says:

- `developer` becomes `system` where the template refuses `developer`;
- a `system` message after the first non-system message is moved into the leading system
  message (one is made at the start if there is none), its text after what is there, where
  the template refuses it; the conversation's other messages keep their order;
- where a template refuses `system` altogether, the leading system text opens the first user
  message instead.

Assistant turns are passed as they were produced: their reasoning (`reasoning_content`),
text and tool calls go to the template unchanged, but for the call ids of formats whose
model writes its own into the turn (its family's `fit_messages`: Kimi K2's `functions.NAME:N`), so the
template renders the history as the model wrote it.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import attrs

Messages = list[dict[str, Any]]
Render = Callable[[Messages], object]   # raises when the template refuses the messages


@attrs.frozen
class TemplateRoles:
    """The roles a chat template renders (each True unless a probe saw it raise)."""

    developer: bool = True       # a `developer` message
    late_system: bool = True     # a `system` message after the conversation began
    system: bool = True          # a `system` message at all


_USER = {"role": "user", "content": "Hello."}
_ASSISTANT = {"role": "assistant", "content": "Hi."}
_NEXT_USER = {"role": "user", "content": "Thanks."}
_SYSTEM = {"role": "system", "content": "Be brief."}


def probe_roles(render: Render) -> TemplateRoles:
    """Renders a few short conversations to see which roles the template refuses."""
    def renders(messages: Messages) -> bool:
        try:
            render([dict(m) for m in messages])
        except Exception:   # a template's refusal is whatever it raises
            return False
        return True

    if not renders([_USER]):
        return TemplateRoles()   # it refuses even a plain user message: nothing to learn
    system = renders([_SYSTEM, _USER])
    developer = renders([{"role": "developer", "content": "Be brief."}, _USER])
    base = [_SYSTEM] if system else []
    late = renders([*base, _USER, _ASSISTANT, _SYSTEM, _NEXT_USER]) \
        or not renders([*base, _USER, _ASSISTANT, _NEXT_USER])
    return TemplateRoles(developer=developer, late_system=late, system=system)


def _text(content: Any) -> str:
    return content if isinstance(content, str) else str(content or "")


def fit_roles(messages: Sequence[dict[str, Any]], roles: TemplateRoles) -> Messages:
    """`messages` as `roles` lets the template render them (see the module's rules); the
    input is not changed, and with nothing refused it is returned as a copy, unchanged."""
    out: Messages = [dict(m) for m in messages]
    if not roles.developer:
        for message in out:
            if message.get("role") == "developer":
                message["role"] = "system"
    if not roles.late_system or not roles.system:
        out = _hoist_late_system(out)
    if not roles.system:
        out = _system_into_first_user(out)
    return out


def _hoist_late_system(messages: Messages) -> Messages:
    """Every system message after the leading ones, joined into one leading system message."""
    leading: list[str] = []
    late: list[str] = []
    rest: Messages = []
    for message in messages:
        if message.get("role") == "system":
            (late if rest else leading).append(_text(message.get("content")))
        else:
            rest.append(message)
    if not late and len(leading) <= 1:
        return messages
    system = "\n\n".join(text for text in [*leading, *late] if text)
    return [{"role": "system", "content": system}, *rest]


def _system_into_first_user(messages: Messages) -> Messages:
    if not messages or messages[0].get("role") != "system":
        return messages
    system, rest = _text(messages[0].get("content")), messages[1:]
    for i, message in enumerate(rest):
        if message.get("role") == "user":
            merged = dict(message, content=f"{system}\n\n{_text(message.get('content'))}"
                          if system else message.get("content"))
            return [*rest[:i], merged, *rest[i + 1:]]
    return [{"role": "user", "content": system}, *rest]


def render_fitted(render: Callable[[Messages], Any], messages: Sequence[dict[str, Any]],
                  roles: TemplateRoles) -> Any:
    """Renders `messages` fitted to `roles` (a model family fits them to its own needs
    first: `families.base.Family.fit_messages`); when the template still raises and the
    messages hold a role the probe did not catch (a template that refuses only some
    positions), it renders them once more with developer and late system messages merged,
    and raises that render's error if it fails too."""
    messages = list(messages)
    fitted = fit_roles(messages, roles)
    try:
        return render(fitted)
    except Exception:
        retry = fit_roles(messages, attrs.evolve(
            roles, developer=False, late_system=False))
        if retry == fitted:
            raise
        return render(retry)
