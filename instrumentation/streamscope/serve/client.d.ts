// Types for client.js: streamscope's browser client for a `streamscope.serve.relay()` stream.

/** Reads the relay at `url` (fetch and a stream reader), reconnects and resumes it, and tells one ending.
 * Throws a TypeError at once for a wrong argument (a misspelt option, with did-you-mean; a wrong type;
 * a GET or HEAD with a body); every other failure is the ending. */
export function relayStream(url: string | URL, options?: RelayOptions): RelayStream;

/** The WHATWG event-stream rules: returns `feed(text)`, to call with each decoded piece of the body
 * (a piece may end anywhere, a CRLF pair included). `id` is the last event id seen, "" before any. */
export function sseParser(onEvent: (name: string, data: string, id: string) => void,
                          onComment?: (text: string) => void): (text: string) => void;

export interface RelayOptions {
  /** Default "POST" when `body` is given, else "GET". */
  method?: string;
  /** Sent again on every reconnect (and with the cancel): it must be re-sendable. */
  body?: string | URLSearchParams | Blob | ArrayBuffer | FormData | null;
  /** The page's own headers, sent on every request. */
  headers?: Record<string, string>;
  /** Default: a new random UUID (keep it, e.g. in sessionStorage, to resume after a page reload). */
  idempotencyKey?: string;
  /** Reconnects in a row with no event between them; default 5. */
  retries?: number;
  /** Seconds; defaults 0.5 and 8. delay = random() * min(max, initial * 2 ** (attempt - 1)) ("full jitter"). */
  backoff?: { initial?: number; max?: number };
  /** Each `text/event-stream` response, as it opens; `reconnect` is 0 for the first request. */
  onOpen?: (info: { status: number; requestId: string | null; reconnect: number }) => void;
  /** Each token's text; `stream.text` already includes it. */
  onToken?: (text: string, stream: RelayStream) => void;
  /** A continuation joined the answer: `stream.text` has already dropped the last `drop` code points. */
  onSeam?: (seam: { drop: number; continuation: number }, stream: RelayStream) => void;
  /** Every event, the token, seam and terminal ones included, `data` JSON-parsed (the raw text if not JSON). */
  onEvent?: (name: string, data: unknown, id: string) => void;
  /** Before each reconnect's wait (`delay`, seconds); `reason`: "network" or "request_in_progress". */
  onReconnect?: (info: { attempt: number; delay: number; lastEventId: string | null; reason: string }) => void;
  /** For tests and service workers. */
  fetch?: typeof fetch;
}

export interface RelayStream {
  readonly key: string;
  readonly requestId: string | null;
  /** The answer's text so far, seams applied. */
  readonly text: string;
  readonly lastEventId: string | null;
  /** Resolves exactly once, never rejects. */
  readonly ended: Promise<Ending>;
  /** Stops reading and tells the relay to stop the generation (no-op once ended). */
  abort(): void;
}

export type Ending = Done | Failed | Aborted;

export interface Done {
  type: "done";
  requestId: string;
  finishReason: string | null;
  class: string | null;
  verified: boolean;
  chunks: number;
  text: string;
}

export interface Failed {
  type: "error";
  /** The relay's failure code, or `connection_lost`, `bad_response`, `client_error`. */
  code: string;
  /** A short English sentence for the code. */
  message: string;
  /** The HTTP status: 200 for an in-band `error` event, 204 for nothing to resume, 0 for no response. */
  status: number;
  /** Seconds, from `Retry-After`; null when absent (or not exposed cross-origin). */
  retryAfter: number | null;
  /** Whether any token had arrived (an in-band `error` event: its own `partial`). */
  partial: boolean;
  requestId: string | null;
  /** `connection_lost` only: the `Streamscope-Resume` header of a 204, else "network". */
  reason?: string;
  text: string;
}

export interface Aborted {
  type: "aborted";
  requestId: string | null;
  partial: boolean;
  text: string;
}
