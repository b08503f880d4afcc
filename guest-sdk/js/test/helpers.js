// What the tests share: the wfhost binary, the test workflow module (built once, then kept in
// the system's temporary folder by the hash of its source and of the binary), and real servers
// on free ports, started before a file's tests and killed after them.

import { execFile, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const here = dirname(fileURLToPath(import.meta.url));
const packageRoot = resolve(here, "..");

/** How long a server may take to answer `GET /readyz` 200. */
const READY_WITHIN = 60_000;

/** The wfhost binary: `WFHOST_BIN`, else `$CARGO_TARGET_DIR/debug/wfhost`, else the
 * workspace's `target/debug/wfhost`. */
export function binary() {
  const path =
    process.env.WFHOST_BIN ??
    (process.env.CARGO_TARGET_DIR
      ? join(process.env.CARGO_TARGET_DIR, "debug", "wfhost")
      : resolve(packageRoot, "..", "..", "target", "debug", "wfhost"));
  if (!existsSync(path)) {
    throw new Error(`no wfhost binary at ${path}: build it (cargo build) or set WFHOST_BIN`);
  }
  return path;
}

/** The bytes of test/workflows/shop.js built into a module, built at most once per source. */
export async function shopModule() {
  const source = join(here, "workflows", "shop.js");
  const bin = binary();
  const { mtimeMs, size } = statSync(bin);
  const key = createHash("sha256")
    .update(readFileSync(source))
    .update(`${bin}\0${mtimeMs}\0${size}`)
    .digest("hex")
    .slice(0, 24);
  const cache = join(tmpdir(), "wfhost-client-js-tests");
  mkdirSync(cache, { recursive: true });
  const path = join(cache, `shop-${key}.wasm`);
  if (!existsSync(path)) {
    // Test files run at once may build it together: each writes its own file and renames it
    // into place, so that none reads a half-written one.
    const partial = join(cache, `shop-${key}.${process.pid}.wasm`);
    await promisify(execFile)(bin, ["build", source, "-o", partial], {
      maxBuffer: 16 << 20,
    });
    renameSync(partial, path);
    // Modules built by earlier binaries are of no more use.
    for (const name of readdirSync(cache)) {
      if (/^shop-[0-9a-f]{24}\.wasm$/.test(name) && join(cache, name) !== path) {
        rmSync(join(cache, name), { force: true });
      }
    }
  }
  return readFileSync(path);
}

/** A TCP port nothing listens on now. */
export async function freePort() {
  const server = createServer();
  await new Promise((done) => server.listen(0, "127.0.0.1", done));
  const { port } = server.address();
  await new Promise((done) => server.close(done));
  return port;
}

/** The servers still running, killed when the process exits whatever happened. */
const live = new Set();
process.on("exit", () => {
  for (const child of live) child.kill("SIGKILL");
});

/**
 * A `wfhost serve --http` on a free port with a store of its own, ready (`/readyz` answered
 * 200). `token` starts it with a `--token-file`; `args` are more of its options. `restart()` kills it (SIGKILL, as a crash)
 * and starts it again on the same port and store; `close()` kills it and removes its store.
 */
export async function startServer({ token, args = [] } = {}) {
  const dir = mkdtempSync(join(tmpdir(), "wfhost-client-js-"));
  const server = {
    dir,
    store: join(dir, "wf.db"),
    port: await freePort(),
    token,
    args,
    child: null,
    log: "",
    get url() {
      return `http://127.0.0.1:${this.port}`;
    },
    /** Kills the process (no grace) and waits until it is gone. */
    async kill() {
      const child = this.child;
      if (!child || child.exitCode !== null || child.signalCode !== null) return;
      child.kill("SIGKILL");
      await child.exited;
    },
    /** Starts it again, on the same port and store, once ready. */
    async start() {
      await launch(this);
    },
    async restart() {
      await this.kill();
      await launch(this);
    },
    async close() {
      await this.kill();
      rmSync(dir, { recursive: true, force: true });
    },
  };
  await launch(server);
  return server;
}

/** Starts `server`'s process and polls its `/readyz` until it answers 200, the process exits,
 * or the deadline passes. */
async function launch(server) {
  const args = ["serve", "--store", server.store, "--http", `127.0.0.1:${server.port}`];
  args.push("--worker-function", "payments.charge", "--grace", "1s", "--poll", "50ms");
  args.push(...server.args);
  if (server.token) {
    const file = join(server.dir, "token");
    writeFileSync(file, server.token, { mode: 0o600 });
    args.push("--token-file", file);
  }
  // No collector (OTEL_EXPORTER_OTLP_ENDPOINT) from the caller's environment: a test that
  // traces says so in its arguments.
  const env = Object.fromEntries(
    Object.entries(process.env).filter(([name]) => !name.startsWith("OTEL_")),
  );
  const child = spawn(binary(), args, { stdio: ["ignore", "pipe", "pipe"], env });
  live.add(child);
  let gone = null;
  child.exited = new Promise((done) =>
    child.once("exit", (code, signal) => done({ code, signal })),
  );
  child.exited.then((how) => {
    gone = how;
    live.delete(child);
  });
  child.stdout.on("data", (data) => (server.log += data));
  child.stderr.on("data", (data) => (server.log += data));
  server.child = child;
  const headers = server.token ? { authorization: `Bearer ${server.token}` } : {};
  const deadline = Date.now() + READY_WITHIN;
  for (;;) {
    if (gone) {
      throw new Error(
        `wfhost serve exited (${JSON.stringify(gone)}) before it was ready:\n${server.log}`,
      );
    }
    try {
      const response = await fetch(`${server.url}/readyz`, { headers });
      await response.arrayBuffer();
      if (response.status === 200) return;
    } catch {
      // Not listening yet.
    }
    if (Date.now() > deadline) {
      throw new Error(`wfhost serve was not ready within ${READY_WITHIN} ms:\n${server.log}`);
    }
    await new Promise((done) => setTimeout(done, 50));
  }
}

/**
 * Counts the requests `fetch` sends whose path matches `pattern`, and resolves `next()` when
 * the next one is sent: how a test knows that a call is in flight without sleeping.
 */
export function watchRequests(pattern) {
  const original = globalThis.fetch;
  const watcher = {
    count: 0,
    waiting: [],
    /** Resolves when the next matching request is sent (after the calls counted so far). */
    next() {
      return new Promise((done) => this.waiting.push(done));
    },
    restore() {
      globalThis.fetch = original;
    },
  };
  globalThis.fetch = (input, init) => {
    const url = new URL(typeof input === "string" ? input : input.url);
    const promise = original(input, init);
    if (pattern.test(`${init?.method ?? "GET"} ${url.pathname}`)) {
      watcher.count += 1;
      for (const done of watcher.waiting.splice(0)) done();
    }
    return promise;
  };
  return watcher;
}

/** A promise with its resolve and reject, for tests that synchronise on events. */
export function deferred() {
  let resolve;
  let reject;
  const promise = new Promise((yes, no) => {
    resolve = yes;
    reject = no;
  });
  return { promise, resolve, reject };
}
