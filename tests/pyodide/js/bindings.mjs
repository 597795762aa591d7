// The bindings and handler arguments a Python Worker receives from workerd, as
// JavaScript objects, for the real-Pyodide tier's runtime stand-in
// (tests/pyodide/inside/workerd.py).
//
// Both Workers SDKs decide how to wrap a binding by its JavaScript
// constructor's name (`value.constructor.name`): "DurableObjectNamespace" and
// "Fetcher" get RPC wrappers, "D1Database" and "DurableObjectStorage" (the
// external SDK) a converting wrapper, anything else passes through. So every
// object here is an instance of a class with workerd's name for it, and the
// SDK under test picks the wrapper it picks in production.
//
// * D1Database / D1PreparedStatement forward to Miniflare's real D1 (whose
//   proxy objects carry no useful constructor name).
// * DurableObjectNamespace.getByName(name) / get(idFromName(name)) give a
//   stub with one method per RPC method of the object's class (workerd's
//   stubs answer any name; a JS Proxy doing that here crashed Node 20's V8
//   in its deoptimizer once warm, so the names are listed up front). A
//   call structured-clones its arguments (V8's real
//   structuredClone: what cannot be cloned throws DataCloneError), hands
//   them to the object (`dispatch`, a Python callable: it finds or makes the
//   instance and calls the method), and clones the reply back. A Python
//   exception in the object reaches the caller as a plain Error whose
//   message is "PythonError: " and the remote traceback (measured).
// * DurableObjectState is `ctx` of an object: `storage` (js/do_storage.mjs)
//   and `id`; ExecutionContext is a Worker's `ctx`; ScheduledController the
//   cron handler's controller; AlarmInvocationInfo alarm()'s argument.

export class D1PreparedStatement {
  constructor(statement) {
    this._statement = statement;
  }
  bind(...values) {
    return new D1PreparedStatement(this._statement.bind(...values));
  }
  first(column) {
    return column === undefined ? this._statement.first() : this._statement.first(column);
  }
  run() {
    return this._statement.run();
  }
  all() {
    return this._statement.all();
  }
  raw(options) {
    return options === undefined ? this._statement.raw() : this._statement.raw(options);
  }
}

export class D1Database {
  constructor(db) {
    this._db = db;
  }
  prepare(query) {
    return new D1PreparedStatement(this._db.prepare(query));
  }
  batch(statements) {
    const unwrapped = [];
    for (const statement of statements) {
      unwrapped.push(statement instanceof D1PreparedStatement ? statement._statement : statement);
    }
    return this._db.batch(unwrapped);
  }
  exec(query) {
    return this._db.exec(query);
  }
}

export class DurableObjectId {
  // `named` false: the id of an object its alarm woke cold, whose `name` is
  // undefined (observed in workerd 1.20260424.1, cloudflare/partykit#391).
  constructor(name, named = true) {
    this._name = name;
    this.name = named ? name : undefined;
  }
  toString() {
    return `id-${this._name}`;
  }
  equals(other) {
    return other instanceof DurableObjectId && other._name === this._name;
  }
}

function remoteError(error) {
  // Pyodide's PythonError carries the traceback as its message; over RPC the
  // caller sees a plain Error: "PythonError: Traceback ...".
  if (error && error.name === "PythonError") return new Error(`PythonError: ${error.message}`);
  return error;
}

/** A stub: one async method per RPC method of the object's class. */
class DurableObjectStub {
  constructor(namespace, name) {
    this.id = new DurableObjectId(name);
    this.name = name;
    for (const method of namespace._methods) {
      this[method] = async (...args) => {
        const sent = structuredClone(args);
        let reply;
        try {
          reply = await namespace._dispatch(name, method, sent);
        } catch (error) {
          throw remoteError(error);
        }
        return structuredClone(reply);
      };
    }
  }
}

export class DurableObjectNamespace {
  /** `dispatch(name, method, args)`: the object's side of one call (Python);
   * `methods`: the RPC method names of the object's class. */
  constructor(dispatch, methods) {
    this._dispatch = dispatch;
    this._methods = Array.from(methods);
  }
  idFromName(name) {
    return new DurableObjectId(String(name));
  }
  get(id) {
    return this.getByName(id.name);
  }
  getByName(name) {
    return new DurableObjectStub(this, String(name));
  }
}

export class DurableObjectState {
  constructor(storage, name, named = true) {
    this.storage = storage;
    this.id = new DurableObjectId(name, named);
  }
  waitUntil(promise) {
    Promise.resolve(promise).catch(() => {});
  }
}

export class ExecutionContext {
  constructor() {
    /** What waitUntil was given: the runtime keeps the event open until it settles. */
    this.kept = [];
  }
  waitUntil(promise) {
    this.kept.push(Promise.resolve(promise).catch(() => {}));
  }
  /** Settles once everything given to waitUntil has (and what that gave, in turn). */
  async settled() {
    while (this.kept.length > 0) {
      const kept = this.kept.splice(0);
      await Promise.all(kept);
    }
  }
  passThroughOnException() {}
}

/** A Queues producer binding (the runtime names its class WorkerQueue, which
 * the external SDK looks for to wrap it): send() clones the body as Queues does (V8's
 * serializer, structuredClone here), so a body Queues cannot take fails
 * here too (a PyProxy, a Map); `sent` keeps the clones. */
export class WorkerQueue {
  constructor() {
    this.sent = [];
  }
  async send(body) {
    this.sent.push(structuredClone(body));
  }
}

/** A delivered batch (the runtime's MessageBatch): which of ackAll and
 * retryAll the consumer called, in order, is kept in `calls`. */
export class MessageBatch {
  constructor(queue, bodies) {
    this.queue = queue;
    this.messages = bodies.map((body, index) => ({
      id: String(index), body, attempts: 1, timestamp: new Date(0), ack() {}, retry() {},
    }));
    this.calls = [];
  }
  ackAll() {
    this.calls.push("ackAll");
  }
  retryAll() {
    this.calls.push("retryAll");
  }
}

export class ScheduledController {
  constructor(cron, scheduledTime) {
    this.cron = cron;
    this.scheduledTime = scheduledTime;
  }
  noRetry() {}
}

export class AlarmInvocationInfo {
  constructor(retryCount) {
    this.retryCount = retryCount;
    this.isRetry = retryCount > 0;
  }
}

/** The env of a deployment: a plain object holding the bindings. */
export function makeEnv(bindings) {
  return Object.fromEntries(bindings);
}
