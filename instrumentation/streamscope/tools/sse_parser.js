// The event-stream rules (WHATWG), enough for the relay: fields, comments, a blank line dispatches.
// sseParser(onEvent, onComment) returns feed(text), to call with each piece of the body as it is
// decoded: onEvent(name, data, lastEventId) for each event the text completes, onComment(text) (if
// given) for each comment line, keep-alives included. The demo page inlines it (demo_page.py); the
// relay's browser tests load it (tests/serve/page.html), so they read the stream as the demo does.
function sseParser(onEvent, onComment) {
  let buffer = "", current = {}, lastId = "";
  return text => {
    buffer += text.replace(/\r\n?/g, "\n");
    let cut;
    while ((cut = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 1);
      if (line === "") {
        if ("data" in current) onEvent(current.event || "message", current.data, lastId);
        current = {};
      } else if (line.startsWith(":")) {
        if (onComment) onComment(line.slice(1).trim());
      } else {
        const colon = line.indexOf(":");
        const name = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        if (name === "data") current.data = "data" in current ? current.data + "\n" + value : value;
        else if (name === "event") current.event = value;
        else if (name === "id" && !value.includes("\0")) lastId = value;
      }
    }
  };
}
