// Server-sent events read with fetch: the page needs POST bodies and an Authorization
// header, which EventSource cannot send. The parser is pure (text in, frames out); the
// reader only loops over the response body.

/** A frame: `id` (the session log's sequence number, or null), `event` and `data` (text). */
export class SseParser {
  #data = [];
  #event = "";
  #id = null;
  #partial = "";

  /** Feed a chunk of decoded text; returns the frames it completed. */
  feed(text) {
    let buffer = this.#partial + text;
    // A "\r" at the end may be the first half of "\r\n": keep it for the next chunk.
    const held = buffer.endsWith("\r") ? "\r" : "";
    if (held) buffer = buffer.slice(0, -1);
    const lines = buffer.split(/\r\n|\r|\n/);
    this.#partial = lines.pop() + held;
    const frames = [];
    for (const line of lines) {
      const frame = this.#line(line);
      if (frame) frames.push(frame);
    }
    return frames;
  }

  #line(line) {
    if (line === "") return this.#dispatch();
    if (line.startsWith(":")) return null; // a comment: the server's keep-alive
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") this.#data.push(value);
    else if (field === "event") this.#event = value;
    else if (field === "id" && !value.includes("\0")) this.#id = value;
    return null;
  }

  #dispatch() {
    const frame = this.#data.length
      ? { id: this.#id, event: this.#event || "message", data: this.#data.join("\n") }
      : null;
    this.#data = [];
    this.#event = "";
    this.#id = null;
    return frame;
  }
}

/** Yield the frames of a `text/event-stream` response body as they arrive. */
export async function* readFrames(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  const parser = new SseParser();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      yield* parser.feed(value);
    }
  } finally {
    // Stops the download when the reader leaves early; harmless once the body has ended.
    reader.cancel().catch(() => {});
  }
}
