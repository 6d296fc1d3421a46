// streamscope's browser client: reads a `streamscope.serve.relay()` stream with fetch and a stream
// reader, reconnects and resumes it, and tells exactly one ending. An ES module, no dependencies,
// no build step (ES2020). Types: client.d.ts beside it.
//
// The wire protocol, every request to the same URL with the same method, body and page headers:
// * the first: `Accept: text/event-stream` and `Idempotency-Key: <key>`;
// * a reconnect, when fetch rejects, the body errors or ends without a terminal event: the same key,
//   and `Last-Event-ID: <id of the last event received>` once any event has arrived (the key alone
//   follows the same generation from its start), after a full-jitter backoff;
// * `abort()`: the fetch is aborted, then one `keepalive` request with `Streamscope-Cancel: 1` and the
//   key (and Last-Event-ID) tells the relay to stop the generation; its answer is ignored.
// Answers:
// * 200 `text/event-stream`: events `token` {text}, `seam` {request_id, continuation, drop} (drop the
//   last `drop` code points shown), any other name (passed to onEvent), then one terminal event: `done`
//   {request_id, chunks, finish_reason, class, verified} or `error` {code, request_id, partial}. Each id
//   is `<request_id>:<n>`, n counting from 1 across reconnects: an n already seen is skipped;
// * another status, with a JSON body {code, request_id} and maybe `Retry-After`: a failure before the
//   stream; 409 `request_in_progress` is retried after Retry-After (counted against `retries`);
// * 204 to a reconnect, with `Streamscope-Resume: <reason>`: nothing to resume (`connection_lost`).

const MESSAGES = {
  rate_limited: "Too many requests; try again {later}.",
  upstream_unavailable: "The model is overloaded; try again {later}.",
  upstream_timeout: "The model took too long to answer; try again {later}.",
  upstream_unreachable: "The connection to the model was lost; try again {later}.",
  upstream_rejected: "The model rejected the request.",
  circuit_open: "The model is unavailable; try again {later}.",
  internal_error: "Something went wrong on the server.",
  idempotency_key_reused: "This request's key was already used for a different request.",
  request_in_progress: "The same request is still starting; try again {later}.",
  connection_lost: "The connection was lost before the answer was complete.",
  bad_response: "The server's answer could not be read.",
  client_error: "The page's stream reader failed.",
};

function message(code, retryAfter) {
  const text = MESSAGES[code] || `The request failed (${code}).`;
  return text.replace("{later}", retryAfter === null ? "later" : `in ${retryAfter} s`);
}

// Retry-After: seconds, or an HTTP date; null when absent or unreadable.
function retryAfterOf(response) {
  const value = response.headers.get("Retry-After");
  if (value === null) return null;
  if (/^\s*\d+\s*$/.test(value)) return Number(value);
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : Math.max(0, Math.ceil((at - Date.now()) / 1000));
}

function randomKey() {
  const crypto = globalThis.crypto;
  if (typeof crypto.randomUUID === "function") return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;  // version 4
  b[8] = (b[8] & 0x3f) | 0x80;  // variant 10
  const hex = Array.from(b, x => x.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

// A callback that throws is reported and does not stop the stream.
function call(callback, ...args) {
  if (typeof callback !== "function") return;
  try {
    callback(...args);
  } catch (error) {
    console.error("streamscope client: a callback threw", error);
  }
}

// The WHATWG event-stream rules. feed(text) per decoded piece: a piece may end anywhere, even between
// the CR and the LF of one line ending. onEvent(name, data, id) per event, onComment(text) per comment.
export function sseParser(onEvent, onComment) {
  const lineEnd = /\r\n|\r|\n/g;
  let buffer = "", data = "", name = "", lastId = "", pendingCR = false, first = true;

  function line(text) {
    if (text === "") {  // dispatch
      const event = name || "message", body = data;
      data = name = "";
      if (body !== "") onEvent(event, body.slice(0, -1), lastId);
      return;
    }
    if (text[0] === ":") {
      if (onComment) onComment(text.slice(1).replace(/^ /, ""));
      return;
    }
    const colon = text.indexOf(":");
    const field = colon < 0 ? text : text.slice(0, colon);
    let value = colon < 0 ? "" : text.slice(colon + 1);
    if (value[0] === " ") value = value.slice(1);
    if (field === "data") data += value + "\n";
    else if (field === "event") name = value;
    else if (field === "id" && !value.includes("\0")) lastId = value;
    // `retry` and unknown fields are ignored: the client keeps its own backoff.
  }

  return text => {
    if (!text) return;
    if (first && text[0] === "\uFEFF") text = text.slice(1);
    first = false;
    if (pendingCR && text[0] === "\n") text = text.slice(1);  // the LF of a CRLF split across pieces
    pendingCR = false;
    buffer += text;
    let start = 0, match;
    lineEnd.lastIndex = 0;
    while ((match = lineEnd.exec(buffer)) !== null) {
      const piece = buffer.slice(start, match.index);
      start = lineEnd.lastIndex;
      pendingCR = match[0] === "\r" && start === buffer.length;
      line(piece);
    }
    buffer = buffer.slice(start);
  };
}

// "<request_id>:<n>" → [request_id, n], or null.
function parseId(id) {
  const colon = id.lastIndexOf(":");
  const n = Number(id.slice(colon + 1));
  return colon > 0 && Number.isInteger(n) && n > 0 ? [id.slice(0, colon), n] : null;
}

function parseJson(text) {
  try { return JSON.parse(text); } catch (error) { return undefined; }
}

// The options and what each takes: a misspelt or mistyped one is a TypeError at the call, in one line.
const OPTIONS = {method: "string", body: "", headers: "object", idempotencyKey: "string", retries: "number",
                 backoff: "object", onOpen: "function", onToken: "function", onSeam: "function",
                 onEvent: "function", onReconnect: "function", fetch: "function"};
const BACKOFF = {initial: "number", max: "number"};

// The known name nearest to a misspelt one (edit distance at most 2, or the same but for case), or null.
function nearest(name, known) {
  let best = null, bestDistance = 3;
  for (const candidate of known) {
    if (candidate.toLowerCase() === name.toLowerCase()) return candidate;
    const d = distance(name, candidate);
    if (d < bestDistance) [best, bestDistance] = [candidate, d];
  }
  return best;
}

function distance(a, b) {
  let row = Array.from({length: b.length + 1}, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const next = [i];
    for (let j = 1; j <= b.length; j++) {
      next[j] = Math.min(row[j] + 1, next[j - 1] + 1, row[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    row = next;
  }
  return row[b.length];
}

function checkOptions(where, given, table) {
  if (given === null || typeof given !== "object") {
    throw new TypeError(`${where} takes an object of options, not ${given === null ? "null" : typeof given}`);
  }
  for (const [name, value] of Object.entries(given)) {
    if (!(name in table)) {
      const near = nearest(name, Object.keys(table));
      throw new TypeError(`${where} has no option "${name}"` +
                          (near ? `; did you mean "${near}"?` : `; it takes ${Object.keys(table).join(", ")}`));
    }
    const want = table[name];
    if (want && value !== undefined && value !== null && typeof value !== want) {
      throw new TypeError(`relayStream: option "${name}" takes a ${want}, not ${typeof value}`);
    }
  }
}

export function relayStream(url, options = {}) {
  if (typeof url !== "string" && !(url instanceof URL)) {
    throw new TypeError(`relayStream: url takes a string or a URL, not ${url === null ? "null" : typeof url}`);
  }
  checkOptions("relayStream()", options, OPTIONS);
  if (options.backoff != null) checkOptions("relayStream()'s backoff", options.backoff, BACKOFF);
  const o = options;
  const fetcher = o.fetch || ((...args) => globalThis.fetch(...args));
  let body = o.body ?? null;
  const method = o.method || (body !== null ? "POST" : "GET");
  if (body !== null && /^(GET|HEAD)$/i.test(method)) {
    throw new TypeError(`relayStream: a ${method} request cannot have a body (method: "POST")`);
  }
  const key = o.idempotencyKey || randomKey();
  const retries = o.retries ?? 5;
  const initial = o.backoff?.initial ?? 0.5;
  const max = o.backoff?.max ?? 8;
  if (!Number.isInteger(retries) || retries < 0) {
    throw new TypeError(`relayStream: option "retries" takes a whole number >= 0, not ${retries}`);
  }
  if (!(initial > 0 && max >= initial && Number.isFinite(max))) {
    throw new TypeError(`relayStream: option "backoff" takes seconds with 0 < initial <= max, not ${initial} and ${max}`);
  }

  let text = "", requestId = null, lastEventId = null, lastN = 0, tokens = false;
  let finished = false, aborted = false, controller = null, wake = null, inRow = 0;
  let settle;
  const ended = new Promise(resolve => { settle = resolve; });

  function end(ending) {
    if (finished) return;
    finished = true;
    settle(ending);
  }

  function failed(code, status, fields = {}) {
    const retryAfter = fields.retryAfter === undefined ? null : fields.retryAfter;
    return {type: "error", code, message: message(code, retryAfter), status, retryAfter,
            partial: tokens, requestId, ...fields, text};
  }

  function headers(extra) {
    const all = new Headers(o.headers || {});
    for (const [name, value] of Object.entries(extra)) all.set(name, value);
    all.set("Idempotency-Key", key);
    if (lastEventId !== null) all.set("Last-Event-ID", lastEventId);
    return all;
  }

  // One event, in order; returns the ending for a terminal event.
  function received(name, raw, id) {
    const parsed = parseId(id);
    if (parsed !== null) {
      if (parsed[1] <= lastN) return null;  // already shown before a reconnect
      lastN = parsed[1];
      requestId = parsed[0];
    }
    if (id !== "") lastEventId = id;
    inRow = 0;
    const data = parseJson(raw);
    const fields = data !== null && typeof data === "object" ? data : {};
    const isToken = name === "token" && typeof fields.text === "string";
    const drop = Math.max(0, Number(fields.drop) || 0);
    if (isToken) {
      text += fields.text;
      tokens = true;
    } else if (name === "seam" && drop > 0) {
      text = Array.from(text).slice(0, -drop).join("");  // code points, as Python's len counts them
    }
    call(o.onEvent, name, data === undefined ? raw : data, id);
    if (isToken) call(o.onToken, fields.text, stream);
    if (name === "seam") call(o.onSeam, {drop, continuation: Number(fields.continuation) || 0}, stream);
    if (name === "done") {
      return {type: "done", requestId: fields.request_id || requestId || "", text,
              finishReason: fields.finish_reason ?? null, class: fields.class ?? null,
              verified: fields.verified === true, chunks: Number(fields.chunks) || 0};
    }
    if (name === "error") {
      if (typeof fields.request_id === "string") requestId = fields.request_id;
      return failed(typeof fields.code === "string" ? fields.code : "internal_error", 200,
                    {partial: typeof fields.partial === "boolean" ? fields.partial : tokens});
    }
    return null;
  }

  // One request. Resolves with {ending} or {again: reason, after: seconds}; rejects on a network error.
  async function connect(reconnect) {
    controller = new AbortController();
    const response = await fetcher(url, {method, body, cache: "no-store", signal: controller.signal,
                                         headers: headers({Accept: "text/event-stream"})});
    requestId = response.headers.get("X-Request-Id") || requestId;
    const type = (response.headers.get("Content-Type") || "").toLowerCase();
    if (response.status === 204) {
      const reason = response.headers.get("Streamscope-Resume") || "network";
      return {ending: failed("connection_lost", 204, {reason})};
    }
    if (!response.ok) {
      const answer = parseJson(await response.text());
      const retryAfter = retryAfterOf(response);
      if (answer === null || typeof answer !== "object" || typeof answer.code !== "string") {
        return {ending: failed("bad_response", response.status, {retryAfter})};
      }
      if (typeof answer.request_id === "string") requestId = answer.request_id;
      if (answer.code === "request_in_progress" && inRow < retries) return {again: answer.code, after: retryAfter};
      return {ending: failed(answer.code, response.status, {retryAfter})};
    }
    if (!type.startsWith("text/event-stream") || !response.body) {
      if (response.body) response.body.cancel().catch(() => {});
      return {ending: failed("bad_response", response.status)};
    }
    call(o.onOpen, {status: response.status, requestId, reconnect});
    let ending = null;
    const feed = sseParser((name, data, id) => {
      if (ending === null && !finished) ending = received(name, data, id);
    });
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    for (;;) {
      const {value, done} = await reader.read();
      feed(done ? decoder.decode() : decoder.decode(value, {stream: true}));
      if (ending !== null) {
        reader.cancel().catch(() => {});
        return {ending};
      }
      if (done) return {again: "network"};
    }
  }

  function pause(seconds) {
    return new Promise(resolve => {
      const timer = setTimeout(resolve, seconds * 1000);
      wake = () => { clearTimeout(timer); resolve(); };
    });
  }

  async function run() {
    // A FormData gets a new multipart boundary per fetch: its bytes are fixed once, so that every
    // request is the same request to the relay (its idempotency key is bound to the body).
    if (typeof FormData !== "undefined" && body instanceof FormData) body = await new Response(body).blob();
    for (let reconnect = 0; !finished; reconnect++) {
      let outcome;
      try {
        outcome = await connect(reconnect);
      } catch (error) {
        outcome = {again: "network"};
      }
      if (finished) return;  // aborted meanwhile
      if (outcome.ending) return end(outcome.ending);
      if (inRow >= retries) return end(failed("connection_lost", 0, {reason: "network"}));
      const attempt = ++inRow;
      let delay = Math.random() * Math.min(max, initial * 2 ** (attempt - 1));
      if (outcome.after != null) delay = Math.max(delay, outcome.after);
      call(o.onReconnect, {attempt, delay, lastEventId, reason: outcome.again});
      await pause(delay);
    }
  }

  function abort() {
    if (finished || aborted) return;
    aborted = true;
    if (controller !== null) controller.abort();
    if (wake !== null) wake();
    end({type: "aborted", requestId, partial: tokens, text});
    // Tell the relay (on whichever worker) to stop the generation. keepalive outlives the page, but
    // caps the body at 64 KiB: a larger one is sent again without it.
    const cancel = keepalive => fetcher(url, {method, body, keepalive, cache: "no-store",
                                             headers: headers({"Streamscope-Cancel": "1"})});
    Promise.resolve().then(() => cancel(true)).catch(() => cancel(false)).catch(() => {});
  }

  const stream = {
    get key() { return key; },
    get requestId() { return requestId; },
    get text() { return text; },
    get lastEventId() { return lastEventId; },
    ended,
    abort,
  };
  run().catch(error => {
    console.error("streamscope client: the stream reader failed", error);
    end(failed("client_error", 0));
  });
  return stream;
}
