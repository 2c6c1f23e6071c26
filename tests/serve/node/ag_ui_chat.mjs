// A conversation with a served harness through AG-UI's own client (@ag-ui/client's
// HttpAgent, as CopilotKit uses it). Usage: node ag_ui_chat.mjs URL MODE
//   approve: ask; when the run ends on an interrupt, answer it with AG-UI's resume (yes)
//   abort:   ask, and abort the run (abortRun) once a tool call's input has arrived
// Prints one JSON line per run: the event types, the token, the outcome and the result.
import { HttpAgent } from "@ag-ui/client";

const [url, mode] = process.argv.slice(2);
const agent = new HttpAgent({
  url,
  threadId: `thread-${mode}`,
  initialMessages: [{ id: "u1", role: "user", content: "Weather in Lisbon?" }],
});

async function run(parameters) {
  const seen = { types: [], token: null, outcome: null, result: null, interrupts: [] };
  const subscriber = {
    onEvent: ({ event }) => {
      seen.types.push(event.type);
      if (mode === "abort" && event.type === "TOOL_CALL_END") agent.abortRun();
    },
    onRunStartedEvent: ({ event }) => {
      seen.token = event.metadata?.conversation_token ?? null;
    },
    onRunFinishedEvent: ({ event }) => {
      seen.outcome = event.outcome?.type ?? null;
      seen.result = event.result ?? null;
      seen.interrupts = event.outcome?.interrupts ?? [];
    },
  };
  try {
    await agent.runAgent(parameters, subscriber);
  } catch (error) {
    seen.error = String(error);
  }
  console.log(JSON.stringify(seen));
  return seen;
}

const first = await run({ forwardedProps: {} });
if (mode === "approve" && first.outcome === "interrupt") {
  const resume = first.interrupts.map((i) => ({
    interruptId: i.id,
    status: "resolved",
    payload: true,
  }));
  await run({ forwardedProps: { conversation_token: first.token }, resume });
}
