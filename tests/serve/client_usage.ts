// Every name client.js exports, used as a page would: test_client_module.py type-checks this file
// against client.d.ts with `tsc --noEmit --strict` (it is never run).
import { relayStream, sseParser } from "../../instrumentation/streamscope/serve/client.js";
import type { Aborted, Done, Ending, Failed, RelayOptions, RelayStream } from "../../instrumentation/streamscope/serve/client.js";

const answer = document.createElement("p");
const marker = document.createElement("p");

function shown(ending: Ending): string {
  switch (ending.type) {
    case "done": {
      const done: Done = ending;
      return `${done.text} (${done.finishReason ?? "?"}, ${done.class ?? "?"}, ${done.verified}, ${done.chunks} chunks, ${done.requestId})`;
    }
    case "error": {
      const failed: Failed = ending;
      const wait: number | null = failed.retryAfter;
      const reason: string | undefined = failed.reason;
      return `${failed.message} [${failed.code} ${failed.status} ${wait ?? "-"} ${reason ?? ""} ${failed.partial}] ${failed.requestId ?? ""}`;
    }
    case "aborted": {
      const aborted: Aborted = ending;
      return `${aborted.text} [stopped${aborted.partial ? ", partial" : ""}] ${aborted.requestId ?? ""}`;
    }
  }
}

const saved: string | null = sessionStorage.getItem("relay-key");
const options: RelayOptions = {
  method: "POST",
  body: JSON.stringify({ question: "Why do streams fail?" }),
  headers: { "Content-Type": "application/json" },
  idempotencyKey: saved ?? undefined,
  retries: 3,
  backoff: { initial: 0.25, max: 4 },
  onOpen: ({ status, requestId, reconnect }) => console.log(status, requestId ?? "", reconnect),
  onToken: (text: string, stream: RelayStream) => { answer.textContent = stream.text; void text; },
  onSeam: ({ drop, continuation }, stream) => { answer.textContent = stream.text; void (drop + continuation); },
  onEvent: (name: string, data: unknown, id: string) => {
    if (name === "thinking" && typeof data === "object" && data !== null) console.log(id, data);
  },
  onReconnect: ({ attempt, delay, lastEventId, reason }) =>
    console.log(`reconnect ${attempt} in ${delay.toFixed(1)} s after ${lastEventId ?? "nothing"}: ${reason}`),
  fetch: (input, init) => fetch(input, init),
};
const stream: RelayStream = relayStream(new URL("/chat", location.href), options);
sessionStorage.setItem("relay-key", stream.key);
const form = new FormData();
form.append("question", "again");
const other = relayStream("/chat", { body: form });
const third = relayStream("/chat?stream=1");
document.querySelector("button")?.addEventListener("click", () => stream.abort());
void stream.ended.then((ending: Ending) => { marker.textContent = shown(ending); });
void Promise.all([other.ended, third.ended]).then(endings => endings.map(shown));
const now: { text: string; requestId: string | null; lastEventId: string | null } = stream;
console.log(now.text, now.requestId, now.lastEventId);

const feed: (text: string) => void = sseParser(
  (name: string, data: string, id: string) => console.log(name, data, id),
  (comment: string) => console.log(comment),
);
feed("event: token\r\ndata: {}\r\n\r\n");
sseParser(() => undefined)(": keep-alive\n\n");

// Misuse the declarations must reject.
// @ts-expect-error: the text is read-only
stream.text = "";
// @ts-expect-error: an ending's type is one of three
const wrong: Ending["type"] = "failed";
// @ts-expect-error: backoff takes seconds as numbers
relayStream("/chat", { backoff: { initial: "1" } });
void wrong;
