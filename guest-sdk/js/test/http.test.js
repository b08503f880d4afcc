// The transport's rules against a stand-in server that answers what each test scripts: which
// refusals and dropped connections are asked again, for which calls, how long it pauses, and how
// answers become errors. Also the pure helpers (ids in paths, queries, durations).

import assert from "node:assert/strict";
import { createServer } from "node:http";
import { after, before, beforeEach, describe, test } from "node:test";

import {
  BadRequest,
  Client,
  Conflict,
  NotFound,
  ServerError,
  StillRunning,
  Timeout,
  TooManyRequests,
  Unavailable,
  Unreachable,
  WfhostError,
} from "../index.js";
import { refusal } from "../src/errors.js";
import { duration, query, segment } from "../src/http.js";

/** What the stand-in answers, one entry per request, and what it was asked. */
let script = [];
let asked = [];
let stub;
let url;

before(async () => {
  stub = createServer((request, response) => {
    let body = "";
    request.on("data", (chunk) => (body += chunk));
    request.on("end", () => {
      asked.push({
        method: request.method,
        url: request.url,
        headers: request.headers,
        body,
        at: Date.now(),
      });
      const next = script.shift() ?? {
        status: 500,
        json: { error: { code: "script", message: "unscripted" } },
      };
      if (next.drop) return request.socket.destroy();
      if (next.hold) return; // Never answered: the client's timeout ends it.
      const headers = { "content-type": "application/json", ...(next.headers ?? {}) };
      response.writeHead(next.status, headers);
      response.end(next.text ?? (next.json === undefined ? "" : JSON.stringify(next.json)));
    });
  });
  await new Promise((done) => stub.listen(0, "127.0.0.1", done));
  url = `http://127.0.0.1:${stub.address().port}`;
});

after(async () => {
  stub.closeAllConnections();
  await new Promise((done) => stub.close(done));
});

beforeEach(() => {
  script = [];
  asked = [];
});

const busy = (code, headers) => ({
  status: 503,
  json: { error: { code, message: code } },
  headers,
});
const workflow = (id, status = "running") => ({
  id,
  status,
  entry: "e",
  module: "m",
  module_name: "m",
  number: 1,
  started: 0,
  steps: 1,
  waiting_for_host: false,
  input: null,
  unread_messages: 0,
  cancel_asked: false,
});
const started = { status: 201, json: { new: true, workflow: workflow("w") } };

describe("asking again", () => {
  test("a 503 that did nothing is asked again, even for a start without an id", async () => {
    script = [busy("not_ready"), busy("too_many_waiting"), busy("too_many_requests"), started];
    const result = await new Client(url).start("m", "e");
    assert.equal(result.new, true);
    assert.equal(asked.length, 4);
  });

  test("another 503 is asked again only for a call safe to repeat", async () => {
    script = [busy("store")];
    await assert.rejects(new Client(url).start("m", "e"), Unavailable);
    assert.equal(asked.length, 1);

    asked = [];
    script = [busy("store"), started];
    assert.equal((await new Client(url).start("m", "e", null, { id: "w" })).id, "w");
    assert.equal(asked.length, 2);

    asked = [];
    script = [busy("store"), { status: 200, json: workflow("w") }];
    assert.equal((await new Client(url).status("w")).id, "w");
    assert.equal(asked.length, 2);
  });

  test("a message and a trigger are not sent twice", async () => {
    script = [busy("store")];
    await assert.rejects(new Client(url).send("w", 1), Unavailable);
    script = [busy("store")];
    await assert.rejects(new Client(url).triggerSchedule("s"), Unavailable);
    assert.equal(asked.length, 2);
  });

  test("a reset is not sent twice; its runs are asked again", async () => {
    script = [busy("store")];
    await assert.rejects(new Client(url).reset("w", { toStep: 2 }), Unavailable);
    assert.equal(asked.length, 1);
    assert.equal(asked[0].url, "/v1/workflows/w/reset");
    assert.deepEqual(JSON.parse(asked[0].body), { to_step: 2 });

    asked = [];
    script = [busy("store"), { status: 200, json: { runs: [workflow("w")] } }];
    const runs = await new Client(url).runs("w");
    assert.deepEqual(
      runs.map((w) => [w.id, w.run]),
      [["w", 1]],
    );
    assert.equal(asked.length, 2);
  });

  test("a dropped connection is asked again only for a call safe to repeat", async () => {
    script = [{ drop: true }];
    await assert.rejects(new Client(url).send("w", "once"), (error) => {
      assert.ok(error instanceof Unreachable);
      assert.equal(error.code, "unreachable");
      return true;
    });
    assert.equal(asked.length, 1);

    asked = [];
    script = [{ drop: true }, { status: 200, json: workflow("w") }];
    assert.equal((await new Client(url).status("w")).id, "w");
    assert.equal(asked.length, 2);
  });

  test("the pause is the Retry-After, at most 2 s", async () => {
    script = [
      busy("not_ready", { "retry-after": "1" }),
      busy("not_ready", { "retry-after": "30" }),
    ];
    script.push({ status: 200, json: { status: "ok" } });
    assert.deepEqual(await new Client(url).ready(), { status: "ok" });
    const [first, second, third] = asked.map((a) => a.at);
    assert.ok(second - first >= 950, `${second - first} ms`);
    // 30 s asked, 2 s waited.
    assert.ok(third - second >= 1_950 && third - second < 10_000, `${third - second} ms`);
  });

  test("asking again stops once retryFor is spent", async () => {
    script = Array.from({ length: 50 }, () => busy("not_ready"));
    await assert.rejects(new Client(url, { retryFor: 0 }).ready(), (error) => {
      assert.ok(error instanceof Unavailable);
      assert.equal(error.status, 503);
      assert.equal(error.code, "not_ready");
      return true;
    });
    assert.equal(asked.length, 1);
  });

  test("a call that gets no answer within the timeout is a Timeout", async () => {
    script = [{ hold: true }];
    await assert.rejects(new Client(url, { timeout: 200 }).status("w"), (error) => {
      assert.ok(error instanceof Timeout);
      assert.equal(error.code, "timeout");
      return true;
    });
    assert.equal(asked.length, 1);
  });
});

describe("requests and answers", () => {
  test("the token goes with every call, and ids are one segment", async () => {
    script = [{ status: 202, json: { message: 7 } }];
    assert.equal(await new Client(`${url}/`, { token: "t0k" }).send("a/b.c d", { x: 1 }), 7);
    const [{ method, url: path, headers, body }] = asked;
    assert.equal(method, "POST");
    assert.equal(path, "/v1/workflows/a%2Fb%2Ec%20d/messages");
    assert.equal(headers.authorization, "Bearer t0k");
    assert.equal(headers["content-type"], "application/json");
    assert.deepEqual(JSON.parse(body), { x: 1 });
  });

  test("a traceparent goes with every call; a start's own wins", async () => {
    const mine = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const theirs = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    script = [started, { status: 200, json: workflow("w") }, started, started, started];
    const traced = new Client(url, { traceparent: mine });
    await traced.start("m", "e");
    await traced.status("w");
    await traced.start("m", "e", null, { traceparent: theirs });
    await new Client(url).start("m", "e", null, { traceparent: theirs });
    await new Client(url).start("m", "e");
    assert.deepEqual(
      asked.map((a) => a.headers.traceparent),
      [mine, mine, theirs, theirs, undefined],
    );
    // Anything but a string is refused before anything is sent.
    assert.throws(() => new Client(url, { traceparent: 17 }), TypeError);
    await assert.rejects(new Client(url).start("m", "e", null, { traceparent: {} }), TypeError);
    assert.equal(asked.length, 5);
  });

  test("a long wait is asked in requests of at most 55 s", async () => {
    script = [
      { status: 202, json: workflow("w") },
      { status: 200, json: { ...workflow("w", "completed"), result: 5 } },
    ];
    assert.equal(await new Client(url).result("w", { wait: 100 }), 5);
    // The stand-in answered at once, so the second request still had more than 55 s to wait.
    assert.deepEqual(
      asked.map((a) => a.url),
      ["/v1/workflows/w/result?wait=55000ms", "/v1/workflows/w/result?wait=55000ms"],
    );
    asked = [];
    script = [{ status: 200, json: { ...workflow("w", "completed"), result: 6 } }];
    assert.equal(await new Client(url).result("w", { wait: "2s" }), 6);
    assert.equal(asked[0].url, "/v1/workflows/w/result?wait=2000ms");
  });

  test("a workflow not ended when the wait is spent is StillRunning", async () => {
    script = [{ status: 202, json: workflow("w") }];
    await assert.rejects(new Client(url).result("w", { wait: 0 }), (error) => {
      assert.ok(error instanceof StillRunning);
      assert.equal(error.workflow.id, "w");
      return true;
    });
    assert.equal(asked.length, 1);
    assert.equal(asked[0].url, "/v1/workflows/w/result");
  });

  test("refusals become errors by status, with their code and message", async () => {
    script = [
      { status: 404, json: { error: { code: "unknown_workflow", message: "no workflow 'w'" } } },
    ];
    await assert.rejects(new Client(url).status("w"), (error) => {
      assert.ok(error instanceof NotFound && error instanceof WfhostError);
      assert.equal(error.status, 404);
      assert.equal(error.code, "unknown_workflow");
      assert.equal(error.message, "no workflow 'w'");
      return true;
    });
    script = [
      { status: 502, text: "<html>bad gateway</html>", headers: { "content-type": "text/html" } },
    ];
    await assert.rejects(new Client(url).status("w"), (error) => {
      assert.ok(error instanceof ServerError);
      assert.equal(error.code, "http");
      assert.equal(error.message, "the server answered 502: <html>bad gateway</html>");
      return true;
    });
  });

  test("each status has its class", () => {
    assert.ok(refusal(400, "bad_request", "m") instanceof BadRequest);
    assert.ok(refusal(409, "conflict", "m") instanceof Conflict);
    assert.ok(refusal(429, "limit", "m") instanceof TooManyRequests);
    assert.ok(refusal(500, "store", "m") instanceof ServerError);
    assert.ok(refusal(504, "timeout", "m") instanceof ServerError);
    const other = refusal(405, "method_not_allowed", "m");
    assert.equal(other.constructor, WfhostError);
    assert.equal(other.name, "WfhostError");
    assert.equal(refusal(404, "x", "m").name, "NotFound");
  });

  test("a client needs an http(s) address", () => {
    assert.throws(
      () => new Client("wf.db"),
      (error) => {
        assert.ok(error instanceof BadRequest);
        assert.equal(error.code, "bad_request");
        assert.equal(error.status, null);
        return true;
      },
    );
    assert.equal(new Client("https://wf.example/api/").url, "https://wf.example/api");
  });
});

describe("helpers", () => {
  test("segment percent-encodes ids, dots included", () => {
    assert.equal(segment("order-42/3.0"), "order-42%2F3%2E0");
    assert.equal(segment("a b"), "a%20b");
    assert.equal(segment("ü"), "%C3%BC");
    assert.throws(() => segment(".."), BadRequest);
  });

  test("query leaves out what is not given", () => {
    assert.equal(
      query({ status: "running", prefix: "a/b", limit: 5, after: null }),
      "?status=running&prefix=a%2Fb&limit=5",
    );
    assert.equal(query({}), "");
  });

  test("durations are seconds or a number and a unit", () => {
    assert.deepEqual(duration(30), { text: "30000ms", ms: 30_000 });
    assert.deepEqual(duration(0.05), { text: "50ms", ms: 50 });
    assert.deepEqual(duration("2m"), { text: "2m", ms: 120_000 });
    assert.deepEqual(duration("1.5s"), { text: "1.5s", ms: 1_500 });
    assert.throws(() => duration("30"), BadRequest);
    assert.throws(() => duration(-1), BadRequest);
  });
});
