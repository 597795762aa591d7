// A real Cloudflare D1 engine (and real Cloudflare Queues) for the Python tests,
// served over stdin/stdout.
//
// Started by tests/support/d1/miniflare.py (class D1Bridge); not meant to be run by hand,
// though `node tests/support/d1/bridge.mjs` and typing JSON lines works.
//
// How it works
// ------------
// Miniflare (pinned in package.json) runs workerd with a small module worker that
// has D1 bindings DB_0 .. DB_{n-1} (in memory, d1Persist: false). This process
// opens ONE WebSocket to that worker and relays JSON lines: every request line
// read from stdin is sent to the worker as it is, and every answer the worker
// sends back is written to stdout as one line. The worker runs each request on
// `env[db]` -- the very D1 binding a deployed Worker gets (workerd's
// cloudflare-internal:d1-api over Miniflare's D1 Durable Object) -- so binding
// rules, SQL, limits and error messages are D1's own, not re-implemented here.
//
// Queues: the worker also has queue producer bindings Q_0 .. Q_{k-1} (each on a
// queue of the same name) and is itself the consumer of every one of them, so
// Miniflare's own broker batches, delivers, redelivers and counts attempts.
// Its queue() handler cannot use the WebSocket (I/O objects belong to the
// request that made them), so it posts each batch to a service binding served
// by this process, which writes the batch to stdout as an unsolicited event and
// answers the worker with the verdict Python sends back: the calls Python made
// on the batch (ackAll, retryAll, ack, retry), replayed in order on the real
// batch, and whether the handler raised (which makes the runtime retry it all).
//
// Why not `await mf.getD1Database("DB")` from Node? That object is a proxy whose
// synchronous methods (prepare, bind) each block Node on a round trip into
// workerd: measured here, 9.3 ms per prepare+bind+first() through the proxy
// against about 1 ms with the worker running the same calls on env.DB. The
// proxy also cannot pipeline, because a sync call blocks the event loop.
//
// Protocol (one JSON object per line, both directions)
// -----------------------------------------------------
// stdout, first line:  {"event":"ready","databases":[...],"queues":[...],"startup_ms":..,"versions":{..}}
//                      or {"event":"fatal","message":..} (then exit 1)
// request:  {"id":N,"op":OP,"db":"DB_0",...}     answer: {"id":N,"ok":VALUE}
//                                                      or {"id":N,"error":{"name","message","cause"}}
// ops:
//   stmt   {sql, params|null, method: first|all|run|raw, args:[...]}
//          -> env[db].prepare(sql)[.bind(...params)][method](...args)
//          (params null = bind() never called)
//   bind   {sql, params}   -> env[db].prepare(sql).bind(...params); answers null
//          (D1 checks binding types synchronously in bind(); this reports that)
//   batch  {statements:[{sql, params|null}, ...]} -> env[db].batch([...])
//   exec   {sql}           -> env[db].exec(sql)
//   reset  {}              -> drop every user table, view, trigger (and so every
//                             index) of env[db]; answers {"dropped": n}
//   queue_send       {queue, body, options|null}     -> env[queue].send(body[, options])
//   queue_send_batch {queue, messages, options|null} -> env[queue].sendBatch(messages[, options])
//   ping   {}              -> "pong" (answered by the worker, so it checks the whole path)
//   queue_verdict {delivery, calls:[[call, messageId|null, options|null],..], raise:null|text}
//                           -> (handled here) settles that delivery; answers null
//   shutdown {}            -> (handled here) answers, disposes Miniflare, exits 0.
//   EOF on stdin does the same.
//
// unsolicited, when Miniflare delivers a batch:
//   {"event":"queue_batch","delivery":N,"queue":"Q_0","batch_class":..,"message_class":..,
//    "messages":[{"id","body","attempts","timestamp"},..]}
//   and the delivery waits for its queue_verdict (at most VERDICT_TIMEOUT_MS; then the
//   handler throws, so Miniflare retries the batch).
//
// Values are JSON with tagged objects for what JSON cannot say; a tag is an
// object with the key "$":
//   {"$":"undefined"}  {"$":"number","v":"NaN"|"Infinity"|"-Infinity"}
//   {"$":"bigint","v":"123"}  {"$":"Uint8Array"|"ArrayBuffer","b64":".."}
//   {"$":"object","v":{..}}  (a plain object; the worker also uses it for a row
//                             that has a column literally named "$")
//   {"$":"map","v":[[k,v],..]}  {"$":"date","v":ms}
//   {"$":"pyproxy","repr":"..","callable":bool}  (a Python object JS would hold
//                             as a PyProxy: an object whose toString() gives
//                             "repr", which the Python side sets to str(obj))
// Arrays are JSON arrays, null is null, strings/booleans/finite numbers as is.
// The Python side sends undefined for Python None with the built-in SDK shape,
// so D1 itself produces its D1_TYPE_ERROR.

import { createRequire } from "node:module";
import readline from "node:readline";
import { Miniflare, Response as MiniflareResponse } from "miniflare";

const started = performance.now();
const require = createRequire(import.meta.url);

// Anything printed by libraries must not corrupt the protocol on stdout.
console.log = console.error;
console.info = console.error;
console.debug = console.error;

function option(name, fallback) {
  const index = process.argv.indexOf(`--${name}`);
  return index >= 0 && index + 1 < process.argv.length ? process.argv[index + 1] : fallback;
}

const databaseCount = Number.parseInt(option("databases", "8"), 10);
const queueCount = Number.parseInt(option("queues", "4"), 10);
const compatibilityDate = option("compatibility-date", "2026-04-01");
const databases = Array.from({ length: databaseCount }, (_, i) => `DB_${i}`);
const queues = Array.from({ length: queueCount }, (_, i) => `Q_${i}`);
// The consumer of every queue: batches of up to 100 messages, delivered 50 ms after
// the first one arrived (Cloudflare's default is 1 s), up to 4 attempts, no retry delay.
const QUEUE_CONSUMER = { maxBatchSize: 100, maxBatchTimeout: 0.05, maxRetries: 3, retryDelay: 0 };
// How long a delivery waits for Python's verdict before the handler gives up.
const VERDICT_TIMEOUT_MS = 60_000;

const WORKER = String.raw`
const B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

function toBase64(bytes) {
  let text = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    text += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  return btoa(text);
}

function fromBase64(b64) {
  const text = atob(b64);
  const bytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) bytes[i] = text.charCodeAt(i);
  return bytes;
}

function decode(value) {
  if (value === null || typeof value !== "object") return value;
  if (Array.isArray(value)) return value.map(decode);
  switch (value.$) {
    case "undefined": return undefined;
    case "number": return Number(value.v);
    case "bigint": return BigInt(value.v);
    case "Uint8Array": return fromBase64(value.b64);
    case "ArrayBuffer": return fromBase64(value.b64).buffer;
    case "object": {
      const out = {};
      for (const [key, item] of Object.entries(value.v)) out[key] = decode(item);
      return out;
    }
    case "map": return new Map(value.v.map(([key, item]) => [decode(key), decode(item)]));
    case "date": return new Date(value.v);
    case "pyproxy": {
      const repr = String(value.repr);
      const proxy = value.callable ? function () {} : {};
      proxy.toString = () => repr;
      return proxy;
    }
  }
  throw new TypeError("d1 bridge: unknown value tag " + JSON.stringify(value.$));
}

function encode(value) {
  if (value === undefined) return { $: "undefined" };
  if (value === null) return null;
  switch (typeof value) {
    case "number": return Number.isFinite(value) ? value : { $: "number", v: String(value) };
    case "bigint": return { $: "bigint", v: String(value) };
    case "string":
    case "boolean": return value;
    case "function": return { $: "pyproxy", repr: String(value), callable: true };
  }
  if (Array.isArray(value)) return value.map(encode);
  if (value instanceof ArrayBuffer) return { $: "ArrayBuffer", b64: toBase64(new Uint8Array(value)) };
  if (ArrayBuffer.isView(value)) {
    return { $: "Uint8Array", b64: toBase64(new Uint8Array(value.buffer, value.byteOffset, value.byteLength)) };
  }
  if (value instanceof Map) return { $: "map", v: [...value].map(([k, v]) => [encode(k), encode(v)]) };
  if (value instanceof Date) return { $: "date", v: value.getTime() };
  const out = {};
  let tagged = false;
  for (const [key, item] of Object.entries(value)) {
    if (key === "$") tagged = true;
    out[key] = encode(item);
  }
  return tagged ? { $: "object", v: out } : out;
}

function statement(db, spec) {
  const prepared = db.prepare(decode(spec.sql));
  return spec.params == null ? prepared : prepared.bind(...spec.params.map(decode));
}

const METHODS = new Set(["first", "all", "run", "raw"]);
const quote = (name) => '"' + name.replaceAll('"', '""') + '"';
const ORDER = { view: 0, trigger: 1, virtual: 2, table: 3 };

async function reset(db) {
  let dropped = 0;
  for (let round = 0; round < 8; round++) {
    const { results } = await db.prepare(
      "SELECT type, name, sql FROM sqlite_master " +
      "WHERE type IN ('table', 'view', 'trigger') " +
      "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name NOT LIKE '\\_cf\\_%' ESCAPE '\\'"
    ).all();
    if (results.length === 0) return { dropped };
    const kind = (o) => o.type === "table" && /^\s*CREATE\s+VIRTUAL\s/i.test(o.sql || "") ? "virtual" : o.type;
    results.sort((a, b) => ORDER[kind(a)] - ORDER[kind(b)]);
    const drops = results.map((o) =>
      db.prepare("DROP " + (o.type === "table" ? "TABLE" : o.type.toUpperCase()) + " IF EXISTS " + quote(o.name)));
    try {
      await db.batch([db.prepare("PRAGMA defer_foreign_keys = ON"), ...drops]);
      dropped += drops.length;
    } catch (error) {
      // e.g. a shadow table of a virtual table listed before it: drop one by one.
      for (const drop of drops) {
        try { await drop.run(); dropped++; } catch (_) { /* next round */ }
      }
    }
  }
  throw new Error("d1 bridge: reset could not empty the database");
}

function producer(env, name) {
  const queue = env[name];
  if (!/^Q_\d+$/.test(String(name)) || !queue || typeof queue.send !== "function") {
    throw new Error("d1 bridge: no queue binding named " + JSON.stringify(name));
  }
  return queue;
}

async function handle(env, message) {
  if (message.op === "ping") return "pong";
  if (message.op === "queue_send") {
    const args = [decode(message.body)];
    if (message.options != null) args.push(decode(message.options));
    return await producer(env, message.queue).send(...args);
  }
  if (message.op === "queue_send_batch") {
    const args = [decode(message.messages)];
    if (message.options != null) args.push(decode(message.options));
    return await producer(env, message.queue).sendBatch(...args);
  }
  const db = env[message.db];
  if (!db || typeof db.prepare !== "function") {
    throw new Error("d1 bridge: no D1 binding named " + JSON.stringify(message.db));
  }
  switch (message.op) {
    case "stmt": {
      if (!METHODS.has(message.method)) throw new Error("d1 bridge: bad method " + message.method);
      const stmt = statement(db, message);
      return await stmt[message.method](...(message.args || []).map(decode));
    }
    case "bind":
      statement(db, message);
      return null;
    case "batch":
      return await db.batch(message.statements.map((spec) => statement(db, spec)));
    case "exec":
      return await db.exec(decode(message.sql));
    case "reset":
      return await reset(db);
  }
  throw new Error("d1 bridge: unknown op " + JSON.stringify(message.op));
}

function describe(error) {
  if (error instanceof Error) {
    const cause = error.cause instanceof Error ? error.cause.message : (error.cause == null ? null : String(error.cause));
    return { name: error.name, message: error.message, cause };
  }
  return { name: "Error", message: String(error), cause: null };
}

// A delivered batch goes to Python (through the BRIDGE_EVENTS service, served by the
// bridge process); the calls Python made on it are replayed here, in order, on the
// real batch, so the broker's redelivery and attempt counting are Miniflare's own.
async function deliver(batch, env) {
  const messages = batch.messages.map((message) => ({
    id: message.id,
    body: encode(message.body),
    attempts: message.attempts,
    timestamp: message.timestamp.getTime(),
  }));
  const response = await env.BRIDGE_EVENTS.fetch("http://d1-bridge/queue", {
    method: "POST",
    body: JSON.stringify({
      queue: batch.queue,
      batch_class: batch.constructor?.name ?? null,
      message_class: batch.messages[0]?.constructor?.name ?? null,
      messages,
    }),
  });
  const verdict = await response.json();
  const byId = new Map(batch.messages.map((message) => [message.id, message]));
  for (const [call, id, options] of verdict.calls) {
    const args = options == null ? [] : [decode(options)];
    if (call === "ackAll" || call === "retryAll") {
      batch[call](...args);
    } else if (call === "ack" || call === "retry") {
      const target = byId.get(id);
      if (!target) throw new Error("d1 bridge: no message " + JSON.stringify(id) + " in the batch");
      target[call](...args);
    } else {
      throw new Error("d1 bridge: unknown batch call " + JSON.stringify(call));
    }
  }
  if (verdict.raise != null) throw new Error(verdict.raise);
}

export default {
  async queue(batch, env) {
    await deliver(batch, env);
  },

  async fetch(request, env) {
    if (request.headers.get("Upgrade") !== "websocket") {
      return new Response("d1 bridge: connect with a WebSocket", { status: 426 });
    }
    const [client, server] = Object.values(new WebSocketPair());
    server.accept();
    server.addEventListener("message", async (event) => {
      let id = null;
      let reply;
      try {
        const message = JSON.parse(event.data);
        id = message.id;
        reply = { id, ok: encode(await handle(env, message)) };
      } catch (error) {
        reply = { id, error: describe(error) };
      }
      server.send(JSON.stringify(reply));
    });
    return new Response(null, { status: 101, webSocket: client });
  },
};
`;

function packageVersion(name) {
  try {
    return require(`${name}/package.json`).version;
  } catch (_) {
    return null;
  }
}

function writeLine(object) {
  process.stdout.write(JSON.stringify(object) + "\n");
}

function fatal(message) {
  writeLine({ event: "fatal", message });
  process.exit(1);
}

let mf;
let socket;
let closing = false;
const inflight = new Set();
let drained = null;

// Queue deliveries waiting for Python's verdict, by delivery id.
const deliveries = new Map();
let lastDelivery = 0;

async function relayBatch(request) {
  const batch = await request.json();
  const delivery = ++lastDelivery;
  const verdict = await new Promise((resolve) => {
    const timer = setTimeout(() => {
      deliveries.delete(delivery);
      resolve({ calls: [], raise: `d1 bridge: no verdict for delivery ${delivery} within ${VERDICT_TIMEOUT_MS} ms` });
    }, VERDICT_TIMEOUT_MS);
    deliveries.set(delivery, (answer) => {
      clearTimeout(timer);
      resolve(answer);
    });
    writeLine({ event: "queue_batch", delivery, ...batch });
  });
  return MiniflareResponse.json(verdict);
}

function settleDelivery(message) {
  const settle = deliveries.get(message.delivery);
  if (!settle) {
    writeLine({ id: message.id, error: { name: "Error", message: `d1 bridge: no delivery ${JSON.stringify(message.delivery)} is waiting`, cause: null } });
    return;
  }
  deliveries.delete(message.delivery);
  settle({ calls: message.calls || [], raise: message.raise ?? null });
  writeLine({ id: message.id, ok: null });
}

async function shutdown(id) {
  if (closing) return;
  closing = true;
  for (const settle of deliveries.values()) settle({ calls: [], raise: "d1 bridge: shutting down" });
  deliveries.clear();
  // Answer what was already sent before going away (at most 10 s).
  if (inflight.size > 0) {
    await Promise.race([
      new Promise((resolve) => { drained = resolve; }),
      new Promise((resolve) => setTimeout(resolve, 10_000)),
    ]);
  }
  try {
    socket?.close();
  } catch (_) {
    // already closed
  }
  try {
    await mf?.dispose();
  } catch (error) {
    console.error("d1 bridge: dispose failed:", error);
  }
  if (id !== undefined) writeLine({ id, ok: null });
  process.exit(0);
}

process.on("SIGTERM", () => shutdown());
process.on("SIGINT", () => shutdown());

try {
  mf = new Miniflare({
    modules: true,
    script: WORKER,
    compatibilityDate,
    d1Databases: databases,
    d1Persist: false,
    queueProducers: Object.fromEntries(queues.map((name) => [name, { queueName: name }])),
    queueConsumers: Object.fromEntries(queues.map((name) => [name, QUEUE_CONSUMER])),
    serviceBindings: { BRIDGE_EVENTS: relayBatch },
    // workerd's own output (and any console.log in the worker) goes to stderr.
    handleRuntimeStdio(stdout, stderr) {
      stdout.pipe(process.stderr);
      stderr.pipe(process.stderr);
    },
  });
  await mf.ready;
  const response = await mf.dispatchFetch("http://d1-bridge/", { headers: { Upgrade: "websocket" } });
  socket = response.webSocket;
  if (!socket) fatal(`worker refused the WebSocket: HTTP ${response.status}`);
  socket.accept();
} catch (error) {
  fatal(`could not start Miniflare: ${error?.stack || error}`);
}

socket.addEventListener("close", () => {
  if (!closing) fatal("the worker closed the WebSocket");
});

// Warm every database (creates its Durable Object) so each test pays the same.
await Promise.all(databases.map(async (db, i) => {
  const ping = JSON.stringify({ id: -1 - i, op: "reset", db });
  await new Promise((resolve) => {
    const listener = (event) => {
      if (JSON.parse(event.data).id === -1 - i) {
        socket.removeEventListener("message", listener);
        resolve();
      }
    };
    socket.addEventListener("message", listener);
    socket.send(ping);
  });
}));

socket.addEventListener("message", (event) => {
  process.stdout.write(event.data + "\n");
  const match = /^\{"id":(-?\d+)/.exec(event.data);
  if (match) inflight.delete(Number(match[1]));
  if (drained && inflight.size === 0) drained();
});

const input = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
input.on("line", (line) => {
  if (!line.trim()) return;
  let message;
  try {
    message = JSON.parse(line);
  } catch (error) {
    writeLine({ id: null, error: { name: "SyntaxError", message: `d1 bridge: bad JSON line: ${error.message}`, cause: null } });
    return;
  }
  if (message.op === "shutdown") {
    shutdown(message.id);
    return;
  }
  if (message.op === "queue_verdict") {
    settleDelivery(message);
    return;
  }
  if (closing) {
    writeLine({ id: message.id, error: { name: "Error", message: "d1 bridge: shutting down", cause: null } });
    return;
  }
  inflight.add(message.id);
  socket.send(line);
});
input.on("close", () => shutdown());

writeLine({
  event: "ready",
  databases,
  queues,
  queue_consumer: QUEUE_CONSUMER,
  compatibility_date: compatibilityDate,
  startup_ms: Math.round(performance.now() - started),
  versions: {
    node: process.version,
    miniflare: packageVersion("miniflare"),
    workerd: packageVersion("workerd"),
  },
});
