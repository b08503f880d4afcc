// The globals a workflow may expect, made over the host's services: `console` (lines on the
// process's stdout and stderr), `crypto.getRandomValues` and `crypto.randomUUID` (journaled
// randomness), `TextEncoder` and `TextDecoder` (UTF-8), `queueMicrotask`; and timers that say
// how a workflow waits instead. Run once, when the engine is made, with the services; it leaves
// nothing else behind.
(function (services) {
  "use strict";

  function show(value) {
    if (typeof value === "string") return value;
    if (value instanceof Error) return value.stack || `${value.name}: ${value.message}`;
    if (typeof value === "function") return `[Function ${value.name || "(anonymous)"}]`;
    if (typeof value === "bigint") return `${value}n`;
    if (typeof value === "symbol" || value === undefined) return String(value);
    try {
      const json = JSON.stringify(value);
      return json === undefined ? String(value) : json;
    } catch {
      return String(value);
    }
  }

  const line = (stream) =>
    function (...args) {
      services.print(stream, args.map(show).join(" "));
    };
  const console = {
    log: line(1),
    info: line(1),
    debug: line(1),
    warn: line(2),
    error: line(2),
  };

  function getRandomValues(array) {
    if (!ArrayBuffer.isView(array) || array instanceof Float32Array || array instanceof Float64Array || array instanceof DataView) {
      throw new TypeError("crypto.getRandomValues takes an integer typed array");
    }
    const bytes = services.randomBytes(array.byteLength);
    new Uint8Array(array.buffer, array.byteOffset, array.byteLength).set(bytes);
    return array;
  }

  function randomUUID() {
    const b = services.randomBytes(16);
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    const hex = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
    return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
  }

  class TextEncoder {
    get encoding() {
      return "utf-8";
    }
    encode(text = "") {
      return services.utf8Encode(String(text));
    }
  }

  class TextDecoder {
    constructor(label = "utf-8") {
      const name = String(label).trim().toLowerCase();
      if (name !== "utf-8" && name !== "utf8" && name !== "unicode-1-1-utf-8") {
        throw new RangeError(`TextDecoder knows UTF-8 only, not '${label}'`);
      }
    }
    get encoding() {
      return "utf-8";
    }
    decode(input = new Uint8Array(0)) {
      let bytes = input;
      if (input instanceof ArrayBuffer) bytes = new Uint8Array(input);
      else if (ArrayBuffer.isView(input) && !(input instanceof Uint8Array)) {
        bytes = new Uint8Array(input.buffer, input.byteOffset, input.byteLength);
      }
      return services.utf8Decode(bytes);
    }
  }

  function noTimers(name) {
    return function () {
      throw new TypeError(
        `${name} is not there: a workflow waits with 'await ctx.sleep(ms)', which the host ` +
          "journals, and runs several commands at once with Promise.all or Promise.race",
      );
    };
  }

  const define = (name, value) =>
    Object.defineProperty(globalThis, name, { value, writable: true, configurable: true, enumerable: false });
  define("console", console);
  define("crypto", Object.freeze({ getRandomValues, randomUUID }));
  define("TextEncoder", TextEncoder);
  define("TextDecoder", TextDecoder);
  define("queueMicrotask", (callback) => {
    if (typeof callback !== "function") throw new TypeError("queueMicrotask takes a function");
    Promise.resolve().then(() => callback());
  });
  for (const name of ["setTimeout", "setInterval", "setImmediate", "clearTimeout", "clearInterval"]) {
    define(name, noTimers(name));
  }
});
