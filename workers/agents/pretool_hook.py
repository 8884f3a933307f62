"""An agent CLI's `PreToolUse` hook: asks the tick's own counter whether a tool call may run.

Run by the CLI for every tool call, as `python -I -S pretool_hook.py URL TOKEN`, with the
call as JSON on stdin; it answers on stdout in Claude Code's hook format. Standard library
only, imported by path: it starts in milliseconds and needs no tickwork import. When the
tick cannot be asked (gone, refusing, broken answer) the call is denied: fail closed.
"""

import json
import sys
import urllib.request

TOKEN_HEADER = "x-tickwork-hook-token"
TIMEOUT_SECONDS = 10.0


def decision(url: str, token: str, call: bytes) -> dict[str, str]:
    """The tick's answer `{"decision": "allow" | "deny", "reason": …}`; deny when unreachable."""
    request = urllib.request.Request(
        url,
        data=call,
        method="POST",
        headers={TOKEN_HEADER: token, "content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as answer:
            told = json.loads(answer.read())
        if told.get("decision") in ("allow", "deny"):
            return {"decision": told["decision"], "reason": str(told.get("reason") or "")}
    except (OSError, ValueError):
        pass
    return {"decision": "deny", "reason": "Not run: the tick's tool budget could not be asked."}


def main() -> int:
    """Read the call, ask the tick, print the hook's answer; always exits 0 (the answer decides)."""
    url, token = sys.argv[1], sys.argv[2]
    told = decision(url, token, sys.stdin.buffer.read())
    answer = {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": told["decision"],
            "permissionDecisionReason": told["reason"],
        }
    }
    sys.stdout.write(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
