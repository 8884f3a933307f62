// tickwork's tool cap inside OpenCode: before every tool call, ask the tick's own counter.
//
// Loaded by the tick's OpenCode (its config's `plugin`), once per run. The counter is the
// tick's governor (TICKWORK_HOOK_URL, shown TICKWORK_HOOK_TOKEN), the same one Claude
// Code's PreToolUse hook asks, so parallel calls are counted in one place. Throwing
// refuses the call: OpenCode ends its tool part with this error, the model sees it. When
// the counter cannot be asked (gone, refusing, a broken answer) the call is refused too:
// fail closed.

const url = process.env.TICKWORK_HOOK_URL;
const token = process.env.TICKWORK_HOOK_TOKEN;
const UNASKED = "Not run: the tick's tool budget could not be asked.";

async function decision(input, output) {
  try {
    const answer = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json", "x-tickwork-hook-token": token },
      body: JSON.stringify({
        tool_name: input.tool,
        tool_use_id: input.callID,
        tool_input: output.args,
      }),
      signal: AbortSignal.timeout(10000),
    });
    const told = await answer.json();
    if (told.decision === "allow" || told.decision === "deny") return told;
  } catch (error) {
    // fall through: refused
  }
  return { decision: "deny", reason: UNASKED };
}

export const TickworkToolBudget = async () => ({
  "tool.execute.before": async (input, output) => {
    const told = await decision(input, output);
    if (told.decision !== "allow") throw new Error(told.reason || UNASKED);
  },
});
