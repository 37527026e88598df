"""Stored prompt templates (`--prompts-dir`): a request's `prompt` rendered into its
instructions, as OpenAI renders its stored prompts.

A template is a UTF-8 text file, `DIR/<id>/<version>.txt`. A `prompt` without a `version`
takes the highest version whose name is an integer (`1`, `2`, ...: OpenAI numbers versions
so). `{{name}}` (spaces allowed inside the braces) is replaced by the variable `name` of
`prompt.variables`, a string or an `input_text` part; an image or file variable cannot become
text and is a 400. Every variable the template names must be given; others are ignored.

The rendered text is the turn's instructions, before the request's own `instructions` (a
blank line between them): like instructions, it is not inherited by a
`previous_response_id` chain, and the response echoes it as `instructions` and the request's
`prompt` as `prompt`. An unknown id (or version) is a 404 naming `prompt.id`
(`prompt.version`); without `--prompts-dir`, any `prompt` is a 400 naming it.
Templates are read when a request names them (in a worker thread), so an edited file
applies to the next request.
"""

from __future__ import annotations

import re
from pathlib import Path

import attrs
import trio

from ..errors import InvalidRequest, NotFound, NotSupportedYet
from ..responses import wire

TEMPLATE_SUFFIX = ".txt"
# What an id or version may be: one path component that is no directory trick.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
VARIABLE = re.compile(r"\{\{\s*([A-Za-z0-9_.-]+)\s*\}\}")


@attrs.frozen
class PromptTemplates:
    """The templates of one directory (None: prompt templates are off)."""

    directory: Path | None

    async def apply(self, req: wire.CreateResponse) -> wire.CreateResponse:
        """`req` with its `prompt` rendered into its instructions (unchanged without one)."""
        if req.prompt is None:
            return req
        if self.directory is None:
            raise NotSupportedYet("stored prompts are off on this server: start it with "
                                  "--prompts-dir DIR (DIR/<id>/<version>.txt)", param="prompt")
        template = await trio.to_thread.run_sync(self.template, req.prompt)
        text = render(template, req.prompt.variables or {})
        instructions = text if not req.instructions else f"{text}\n\n{req.instructions}"
        return attrs.evolve(req, instructions=instructions)

    def template(self, prompt: wire.Prompt) -> str:
        """The template text of `prompt`'s id and version; a 404 naming what is not there."""
        assert self.directory is not None
        folder = self.directory / prompt.id
        if not NAME.fullmatch(prompt.id) or not folder.is_dir():
            raise NotFound(f"Prompt '{prompt.id}' not found.", param="prompt.id")
        version = prompt.version if prompt.version is not None else latest(folder)
        path = folder / f"{version}{TEMPLATE_SUFFIX}"
        if version is None or not NAME.fullmatch(version) or not path.is_file():
            what = f"version '{prompt.version}'" if prompt.version is not None \
                else "numbered version"
            raise NotFound(f"Prompt '{prompt.id}' has no {what}.",
                           param="prompt.version" if prompt.version is not None
                           else "prompt.id")
        return path.read_text(encoding="utf-8")


def latest(folder: Path) -> str | None:
    """The highest integer version among a prompt's templates, if any."""
    numbers = [int(p.stem) for p in folder.glob(f"*{TEMPLATE_SUFFIX}")
               if p.stem.isdigit() and p.is_file()]
    return str(max(numbers)) if numbers else None


def render(template: str, variables: dict[str, wire.PromptVariable]) -> str:
    """`template` with each `{{name}}` replaced by its variable's text."""
    texts: dict[str, str] = {}
    for name, value in variables.items():
        if isinstance(value, str):
            texts[name] = value
        elif isinstance(value, wire.InputText):
            texts[name] = value.text
        else:
            raise InvalidRequest(
                f"prompt variable '{name}' is an {value.type}: a template takes text (a "
                "string or an input_text part)", param=f"prompt.variables.{name}")
    missing = sorted({m for m in VARIABLE.findall(template) if m not in texts})
    if missing:
        raise InvalidRequest(f"the prompt template needs the variable '{missing[0]}'",
                             param=f"prompt.variables.{missing[0]}")
    return VARIABLE.sub(lambda match: texts[match.group(1)], template)
