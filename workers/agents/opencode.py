"""OpenCode (`opencode-ai`) as a tick's agent: `opencode run --format json`, one line per event.

Its whole configuration is the tick's (`OPENCODE_CONFIG_CONTENT`), none of a repository's
(`OPENCODE_DISABLE_PROJECT_CONFIG`: a project's opencode.json or `.opencode/` could add
plugins, which are code, or loosen permissions): one OpenAI-compatible provider whose
`baseURL` is the tick's governor, with the tick's header on every request; the tier's
permissions (`harness.contracts.tiers`), which take denied tools out of what the model is
offered; and tickwork's plugin (`opencode_plugin.js`), which asks the tick's tool budget
before every call and refuses the calls past the cap. `--title` spares the session-title
model call, and the `OPENCODE_DISABLE_*` switches and the pinned ripgrep linked into its
cache folder (`provide_helpers`) keep it off the network.

The prompt comes on stdin, which `opencode run` reads whole when it is no terminal.

Lines: `step_start`; `text` (`part.text`); `reasoning`; `tool_use` (`part.tool`,
`part.callID`, `part.state` with `status`, `input`, `output` or `error`, `time`);
`step_finish` (`part.reason`, `part.tokens`: input, output, reasoning, cache read/write);
`error` (`error.name`, `error.data.message`). The answer is the text of the last step.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, ClassVar

from harness.contracts import (
    AGENT_CLIS,
    DEFAULT_AGENTS_DIR,
    TICK_HEADER,
    AgentKind,
    Api,
    Effort,
    opencode_permissions,
)
from workers.agents.base import AgentCliRun, CliReport, MalformedLineError
from workers.transcript import ToolStatus

PROVIDER = "tickwork"
PLUGIN = Path(__file__).with_name("opencode_plugin.js")
NO_MODELS_CATALOG = Path(__file__).with_name("opencode_models.json")
"""An empty models.dev catalog (`{}`): the tick's config declares its own provider and model,
so OpenCode needs none of the catalog it would otherwise evaluate from its bundled copy of
every provider's models. A one-turn start took 2.56 s of CPU with it against 3.97 s without
(1.9 s of wall against 2.8 s; four runs each, alternated, on the fake upstream)."""
OFFLINE = {
    "OPENCODE_DISABLE_PROJECT_CONFIG": "1",
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    "OPENCODE_DISABLE_CLAUDE_CODE": "1",
    "OPENCODE_EXPERIMENTAL_DISABLE_FILEWATCHER": "1",
    "OPENCODE_DISABLE_FFF": "1",
    "OPENCODE_MODELS_PATH": str(NO_MODELS_CATALOG),
}
"""No models.dev catalog, update check, share link, language-server download, bundled auth
plugins, ~/.claude prompts, file watcher or native file finder (`fff`, a file picker's
index): none of them serves a scheduled tick. Without the finder a start took 0.43 s less
CPU here (median of 6, 3.55 s against 3.98 s, on the tick's own empty workdir)."""
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool-calls": "tool_use"}
"""OpenCode's (the AI SDK's) finish reasons in the words the other agents' ticks use."""


def opencode_config(
    model: str,
    governor_url: str,
    key: str,
    tick_id: str,
    permissions: dict[str, str],
    instructions: Path | None = None,
    effort: Effort | None = None,
) -> dict[str, Any]:
    """The tick's whole OpenCode configuration.

    The effort is the model's `reasoningEffort` option, which the provider sends as
    `reasoning_effort`; without one, OpenCode picks its own for a reasoning model.
    """
    model_config: dict[str, Any] = {"name": model}
    if effort is not None:
        model_config["options"] = {"reasoningEffort": effort}
    config: dict[str, Any] = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            PROVIDER: {
                "npm": "@ai-sdk/openai-compatible",
                "name": "tickwork",
                "options": {
                    "baseURL": f"{governor_url}/v1",
                    "apiKey": key,
                    "headers": {TICK_HEADER: tick_id},
                },
                "models": {model: model_config},
            }
        },
        "model": f"{PROVIDER}/{model}",
        "small_model": f"{PROVIDER}/{model}",
        "plugin": [PLUGIN.as_uri()],
        "permission": permissions,
        "autoupdate": False,
        "share": "disabled",
    }
    if instructions is not None:
        config["instructions"] = [str(instructions)]
    return config


class OpenCodeRun(AgentCliRun):
    """One tick of OpenCode."""

    kind: ClassVar[AgentKind] = "opencode"
    api: ClassVar[Api] = "openai-chat"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._step_text: list[str] = []
        self._config = ""

    def prepare(self) -> None:
        """The configuration, the level's instructions in a file, the packages and helpers."""
        tick = self.tick
        agents_dir = tick.payload.agents_dir or DEFAULT_AGENTS_DIR
        provide_config_packages(agents_dir, tick.home / ".config" / "opencode")
        provide_helpers(agents_dir, tick.home / ".cache" / "opencode" / "bin")
        instructions = self.instructions_file()
        config = opencode_config(
            tick.target.model_id,
            tick.governor_url,
            tick.client_key,
            tick.payload.tick_id,
            opencode_permissions(tick.payload.capabilities()),
            instructions,
            tick.target.effort,
        )
        self._config = json.dumps(config)

    def argv(self) -> list[str]:
        """Headless, JSON events, titled (no title call); the prompt is read from stdin."""
        tick = self.tick
        return [
            str(tick.binary),
            "run",
            "--format",
            "json",
            "--title",
            tick.payload.tick_id,
            "--model",
            f"{PROVIDER}/{tick.target.model_id}",
        ]

    def env(self) -> dict[str, str]:
        """The tick's configuration, the budget's address, and the offline switches."""
        return {
            "OPENCODE_CONFIG_CONTENT": self._config,
            "TICKWORK_HOOK_URL": self.tick.hook_url,
            "TICKWORK_HOOK_TOKEN": self.tick.hook_token,
            **OFFLINE,
        }

    def read(self, line: dict[str, Any]) -> None:
        """Transcript and tool events from one line; `step_finish` and `error` fill the report."""
        kind = line.get("type")
        if not isinstance(kind, str):
            raise MalformedLineError("a line without a `type`")
        if kind == "error":
            self._error(line)
            return
        if kind not in ("step_start", "text", "reasoning", "tool_use", "step_finish"):
            return  # an event of a later version that says nothing tickwork keeps
        part = line.get("part")
        if not isinstance(part, dict):
            raise MalformedLineError(f"a `{kind}` line without its part")
        if kind == "step_start":
            self._step_text = []
        elif kind == "text":
            text = str(part.get("text") or "")
            self._step_text.append(text)
            self.transcript.said(text, "assistant")
        elif kind == "reasoning":
            self.transcript.said(str(part.get("text") or ""), "thinking")
        elif kind == "tool_use":
            self._tool(part)
        else:
            self._step_finish(part)

    def _tool(self, part: dict[str, Any]) -> None:
        state = part.get("state")
        if not isinstance(state, dict):
            raise MalformedLineError("a `tool_use` part without its state")
        call_id = str(part.get("callID") or "")
        status: ToolStatus = "ok" if state.get("status") == "completed" else "error"
        output = state.get("output") if status == "ok" else state.get("error")
        if call_id in self.tick.refused_tools:
            status = "cancelled"
        times = _object(state.get("time"))
        started, ended = times.get("start"), times.get("end")
        duration = self.tick.tool_ms(call_id)  # from the plugin's question, if it asked
        if isinstance(started, int | float) and isinstance(ended, int | float):
            duration = float(ended - started)  # OpenCode's own clock of the run
        self.transcript.tool(
            str(part.get("tool") or "unknown"),
            call_id or None,
            state.get("input"),
            output if isinstance(output, str) else json.dumps(output),
            status,
            duration,
        )

    def _step_finish(self, part: dict[str, Any]) -> None:
        report = self.report
        tokens = part.get("tokens")
        if not isinstance(tokens, dict):
            raise MalformedLineError("a `step_finish` part without its tokens")
        prompt, completion = step_tokens(tokens)
        report.prompt_tokens = (report.prompt_tokens or 0) + prompt
        report.completion_tokens = (report.completion_tokens or 0) + completion
        reason = str(part.get("reason") or "")
        if reason != "tool-calls":
            report.ended = True
            report.text = "".join(self._step_text)
            report.stop_reason = STOP_REASONS.get(reason, reason or None)

    def _error(self, line: dict[str, Any]) -> None:
        error = line.get("error")
        if not isinstance(error, dict):
            raise MalformedLineError("an `error` line without its error")
        data = _object(error.get("data"))
        message = str(data.get("message") or error.get("name") or "error")
        report: CliReport = self.report
        report.ended = True
        report.error = f"{error.get('name') or 'Error'}: {message}"


def provide_config_packages(agents_dir: Path, config_dir: Path) -> None:
    """Give OpenCode's config folder the packages it would otherwise install from npm.

    On every start OpenCode runs an npm install of `@opencode-ai/plugin` into its config
    folder unless package.json, lockfile and node_modules already agree: 64 MB from the
    registry per tick, and a tick that hangs where there is no network. The tick's folder
    gets the pinned manifest and lockfile of `ops/agents/opencode-config` and a link to its
    installed node_modules, which OpenCode then finds complete and leaves alone.
    """
    source = agents_dir / AGENT_CLIS["opencode"].companion_or_fail()
    config_dir.mkdir(parents=True, exist_ok=True)
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(source / name, config_dir / name)
    link = config_dir / "node_modules"
    if not link.is_symlink():
        link.symlink_to(source / "node_modules", target_is_directory=True)


def provide_helpers(agents_dir: Path, bin_dir: Path) -> None:
    """Link the pinned helpers (ripgrep) where OpenCode looks before it downloads its own.

    Without them every start reached for GitHub to download ripgrep into the tick's new
    `HOME` (two DNS queries a start, under strace); with no network its grep and glob tools
    then failed ("ripgrep execution failed").
    """
    bin_dir.mkdir(parents=True, exist_ok=True)
    for helper in AGENT_CLIS["opencode"].helper_paths(agents_dir):
        link = bin_dir / helper.name
        if not link.is_symlink():
            link.symlink_to(helper)


def step_tokens(tokens: dict[str, Any]) -> tuple[int, int]:
    """A step's (prompt, completion) tokens in tickwork's terms.

    The prompt with its cached part (OpenCode's `input` leaves it out), the completion with
    its reasoning.
    """
    cache = _object(tokens.get("cache"))
    try:
        prompt = int(tokens.get("input") or 0) + int(cache.get("read") or 0)
        prompt += int(cache.get("write") or 0)
        completion = int(tokens.get("output") or 0) + int(tokens.get("reasoning") or 0)
    except (TypeError, ValueError) as exc:
        raise MalformedLineError(f"token counts that are no numbers: {tokens}") from exc
    return prompt, completion


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
