// One chat request the way useChat makes it: the AI SDK's DefaultChatTransport sends the
// messages, readUIMessageStream folds the UI message stream into the assistant's message.
// Usage: node ai_sdk_chat.mjs URL '{"chatId": ..., "messages": [...], "body": {...}}'
// Prints the final UI message as JSON.
import { DefaultChatTransport, readUIMessageStream } from "ai";

const [url, request] = [process.argv[2], JSON.parse(process.argv[3])];
const transport = new DefaultChatTransport({ api: url, body: request.body ?? {} });
const stream = await transport.sendMessages({
  chatId: request.chatId,
  messages: request.messages,
  trigger: "submit-message",
  messageId: undefined,
  abortSignal: undefined,
});
let last;
for await (const message of readUIMessageStream({
  stream,
  onError: (error) => {
    throw error;
  },
})) {
  last = message;
}
console.log(JSON.stringify(last));
