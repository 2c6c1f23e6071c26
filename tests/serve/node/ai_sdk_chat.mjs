// One chat request the way useChat makes it: the AI SDK's DefaultChatTransport sends the
// messages, readUIMessageStream folds the UI message stream into the assistant's message.
// Usage: node ai_sdk_chat.mjs URL '{"chatId": ..., "messages": [...], "body": {...}}'
// With "abortOnToolInput": true, the request's AbortController aborts it (as useChat's
// stop() does) once a tool call's input has arrived.
// Prints the final UI message as JSON (with "aborted": true when it was aborted).
import { DefaultChatTransport, readUIMessageStream } from "ai";

const [url, request] = [process.argv[2], JSON.parse(process.argv[3])];
const controller = new AbortController();
const transport = new DefaultChatTransport({ api: url, body: request.body ?? {} });
const stream = await transport.sendMessages({
  chatId: request.chatId,
  messages: request.messages,
  trigger: "submit-message",
  messageId: undefined,
  abortSignal: controller.signal,
});
let last;
let failure;
const onError = (error) => {
  failure = error; // an error of the stream itself, or the abort
};
for await (const message of readUIMessageStream({ stream, onError })) {
  last = message;
  const toolInput = message.parts.some(
    (p) => p.type.startsWith("tool-") && p.state === "input-available",
  );
  if (request.abortOnToolInput && toolInput) controller.abort();
}
if (failure !== undefined && !controller.signal.aborted) throw failure;
console.log(JSON.stringify({ ...last, aborted: controller.signal.aborted }));
