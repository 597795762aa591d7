// A SQLite-backed Durable Object's `ctx.storage`, as a JavaScript object, for
// the real-Pyodide tier: Python code under test calls it through Pyodide's
// real FFI, exactly as it calls workerd's storage.
//
// SQLite is the real engine (sql.js, SQLite compiled to WebAssembly); the
// rules around it are workerd's, as measured in a real workerd (see
// "Measured in real workerd" in shared/reference/python-workers-facts.md)
// or read in its source:
//
// * sql.exec(query, ...bindings) runs at once and returns a cursor:
//   toArray(), one(), raw(), next(), iteration, columnNames, rowsRead,
//   rowsWritten. Several statements separated by ";" run in order; the
//   bindings go to the last one.
// * Bindings: a number binds as a double (every integer is REAL to SQLite),
//   a string as TEXT, null and undefined as NULL (measured: Python None,
//   which Pyodide passes as undefined, stores NULL), an ArrayBuffer or
//   TypedArray as a BLOB, a boolean as the TEXT "true"/"false" (measured),
//   any other object as its String(). A BigInt throws
//   "TypeError: Cannot convert a BigInt value to a number" (measured).
// * At most 100 bound parameters: "too many SQL variables at offset N:
//   SQLITE_ERROR" (measured), N being the offset of the first one too many.
// * BEGIN / COMMIT / ROLLBACK / END / SAVEPOINT / RELEASE throw workerd's
//   message (measured); names starting with _cf_ are refused.
// * Results: INTEGER and REAL come back as JS numbers (an INTEGER beyond
//   2**53 loses precision; REAL 2.0 is the number 2), NULL as null, BLOB as
//   an ArrayBuffer, rows as plain objects keyed by column name.
// * transactionSync(fn) runs fn inside SAVEPOINT _cf_sync_savepoint_<depth>,
//   returns its value, nests, and rolls back and rethrows when fn throws.
// * setAlarm(ms | Date) / getAlarm() (null when unset) / deleteAlarm(), all
//   async; the alarm belongs to the database, so it survives an eviction.
//
// Not modelled: write coalescing between awaits (each statement outside
// transactionSync commits by itself), lazy cursors, the KV API.

import { createRequire } from "node:module";
import { dirname, join } from "node:path";

const require = createRequire(import.meta.url);
// The unminified build: its Statement methods keep their names, so the
// binding of numbers can be replaced (below); the minified one renames them.
const initSqlJs = require("sql.js/dist/sql-wasm-debug.js");

export const TRANSACTION_ERROR_MESSAGE =
  "To execute a transaction, please use the state.storage.transaction() or " +
  "state.storage.transactionSync() APIs instead of the SQL BEGIN TRANSACTION or SAVEPOINT " +
  "statements. The JavaScript API is safer because it will automatically roll back on " +
  "exceptions, and because it interacts correctly with Durable Objects' automatic atomic " +
  "write coalescing.";
export const BIGINT_BINDING = "Cannot convert a BigInt value to a number";
export const WRONG_BINDING_COUNT = "Wrong number of parameter bindings for SQL query.";
export const MAX_BOUND_PARAMETERS = 100;

const TRANSACTION_WORDS = new Set(["BEGIN", "COMMIT", "END", "ROLLBACK", "SAVEPOINT", "RELEASE"]);

let SQL = null;

// sql.js's unminified build reports every heap resize
// through console.warn; those lines say nothing about the tests.
const warn = console.warn.bind(console);
console.warn = (...args) => {
  if (typeof args[0] === "string" && args[0].startsWith("Heap resize call")) return;
  warn(...args);
};


/** Load SQLite (once); returns the sql.js module. */
export async function loadSqlite() {
  if (SQL !== null) return SQL;
  const wasmDir = dirname(require.resolve("sql.js/dist/sql-wasm-debug.wasm"));
  SQL = await initSqlJs({ locateFile: (file) => join(wasmDir, file) });
  // workerd binds every JS number as a double; sql.js would bind a small
  // integer with sqlite3_bind_int. Bind doubles, as workerd does.
  const probe = new SQL.Database();
  const statementPrototype = Object.getPrototypeOf(probe.prepare("SELECT 1"));
  probe.close();
  statementPrototype.bindNumber = function bindNumber(num, pos) {
    if (pos == null) {
      pos = this.pos;
      this.pos += 1;
    }
    this.db.handleError(SQL._sqlite3_bind_double(this.stmt, pos, num));
    return true;
  };
  return SQL;
}

// ------------------------------------------------------------------ SQL text

/** Skip whitespace and comments from `i`; the index of the next token. */
function skipSpace(text, i) {
  for (;;) {
    while (i < text.length && /\s/.test(text[i])) i += 1;
    if (text.startsWith("--", i)) {
      const end = text.indexOf("\n", i);
      i = end === -1 ? text.length : end + 1;
    } else if (text.startsWith("/*", i)) {
      const end = text.indexOf("*/", i + 2);
      i = end === -1 ? text.length : end + 2;
    } else {
      return i;
    }
  }
}

/**
 * The parameters of one statement, as SQLite numbers them: `?` takes the next
 * number after the largest so far, `?NNN` its own, each distinct `:name`,
 * `@name`, `$name` the next one. Returns {largest, beyond}: the largest number
 * and the UTF-8 byte offset of the first parameter numbered above `limit`.
 */
export function scanParameters(text, limit = MAX_BOUND_PARAMETERS) {
  let largest = 0;
  let beyond = null;
  const named = new Set();
  let i = 0;
  while (i < text.length) {
    const ch = text[i];
    if (ch === "'" || ch === '"' || ch === "`" || ch === "[") {
      const close = ch === "[" ? "]" : ch;
      let end = text.indexOf(close, i + 1);
      while (close !== "]" && end !== -1 && text[end + 1] === close) {
        end = text.indexOf(close, end + 2);
      }
      i = end === -1 ? text.length : end + 1;
      continue;
    }
    if (text.startsWith("--", i) || text.startsWith("/*", i)) {
      i = skipSpace(text, i);
      continue;
    }
    if (ch === "?" || ch === ":" || ch === "@" || ch === "$") {
      const start = i;
      i += 1;
      while (i < text.length && /[A-Za-z0-9_]/.test(text[i])) i += 1;
      const token = text.slice(start + 1, i);
      let number;
      if (ch === "?") {
        number = /^[0-9]+$/.test(token) ? Number(token) : largest + 1;
      } else if (token && !named.has(token)) {
        named.add(token);
        number = largest + 1;
      } else {
        continue;
      }
      largest = Math.max(largest, number);
      if (number > limit && beyond === null) {
        beyond = Buffer.byteLength(text.slice(0, start), "utf8");
      }
      continue;
    }
    i += 1;
  }
  return { largest, beyond };
}

function firstWord(text) {
  const i = skipSpace(text, 0);
  const match = /^[A-Za-z_]+/.exec(text.slice(i));
  return match ? match[0].toUpperCase() : "";
}

function mentionsReservedName(text) {
  // _cf_ tables are workerd's own (the alarm, metadata); user SQL may not touch them.
  return /(^|[^A-Za-z0-9_])_cf_/i.test(text.replace(/'([^']|'')*'/g, "''"));
}

function sqliteError(message) {
  const code = /constraint failed/i.test(message) ? "SQLITE_CONSTRAINT" : "SQLITE_ERROR";
  return new Error(`${message}: ${code}`);
}

// ------------------------------------------------------------------ values

function toBinding(value) {
  if (value === null || value === undefined) return null;
  switch (typeof value) {
    case "number":
      return value;
    case "string":
      return value;
    case "boolean":
      return String(value); // measured: True stores the TEXT 'true'
    case "bigint":
      throw new TypeError(BIGINT_BINDING);
  }
  if (value instanceof ArrayBuffer) return new Uint8Array(value);
  if (ArrayBuffer.isView(value)) {
    return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  }
  return String(value); // WebIDL: anything else is converted to a string
}

function fromColumn(value) {
  if (value instanceof Uint8Array) {
    return value.buffer.slice(value.byteOffset, value.byteOffset + value.byteLength);
  }
  return value;
}

// ------------------------------------------------------------------ cursor

class SqlStorageCursor {
  constructor(columns, rows, written) {
    this._columns = columns;
    this._rows = rows;
    this._position = 0;
    this._read = 0;
    this._written = written;
  }

  get columnNames() {
    return [...this._columns];
  }

  get rowsRead() {
    return this._read;
  }

  get rowsWritten() {
    return this._written;
  }

  _take() {
    if (this._position >= this._rows.length) return null;
    this._read += 1;
    return this._rows[this._position++];
  }

  _object(values) {
    const row = {};
    this._columns.forEach((name, index) => {
      row[name] = values[index];
    });
    return row;
  }

  toArray() {
    const out = [];
    let values;
    while ((values = this._take()) !== null) out.push(this._object(values));
    return out;
  }

  one() {
    const values = this._take();
    if (values === null) {
      throw new Error("Expected exactly one result from SQL query, but got no results.");
    }
    if (this._position < this._rows.length) {
      this._position = this._rows.length;
      throw new Error("Expected exactly one result from SQL query, but got multiple results.");
    }
    return this._object(values);
  }

  *raw() {
    let values;
    while ((values = this._take()) !== null) yield [...values];
  }

  next() {
    const values = this._take();
    return values === null ? { done: true, value: undefined }
      : { done: false, value: this._object(values) };
  }

  [Symbol.iterator]() {
    return this;
  }
}

// ------------------------------------------------------------------ storage

/** The object's database: survives evictions (a new storage object over it). */
export class DurableObjectDatabase {
  constructor(sql) {
    this.sqlite = new sql.Database();
    this.alarm = null;
    this.depth = 0;
    /** Every statement user code ran, with its bindings, for tests that watch. */
    this.log = [];
  }

  run(query, bindings) {
    if (typeof query !== "string") {
      throw new TypeError("Failed to execute 'exec' on 'SqlStorage': parameter 1 is not of type 'string'.");
    }
    const values = bindings.map(toBinding);
    // SQLite prepares the statements one at a time (a table created by the
    // first exists for the second); the bindings belong to the last one.
    const statements = this.sqlite.iterateStatements(query);
    try {
      return this._runEach(statements, values, query, bindings);
    } finally {
      // Free the last prepared statement and the SQL text, whatever happened.
      if (statements.activeStatement !== null) statements.activeStatement.free();
      statements.activeStatement = null;
      if (statements.sqlPtr !== null) statements.finalize();
    }
  }

  _runEach(statements, values, query, bindings) {
    let seen = 0;
    for (;;) {
      let step;
      try {
        step = statements.next();
      } catch (error) {
        throw sqliteError(String(error.message ?? error));
      }
      if (step.done) break;
      seen += 1;
      const statement = step.value;
      const text = statement.getSQL();
      const last = !/[^\s;]/.test(stripComments(statements.getRemainingSQL() ?? ""));
      const { word, reserved, largest, beyond } = textRules(text);
      if (TRANSACTION_WORDS.has(word)) throw new Error(TRANSACTION_ERROR_MESSAGE);
      if (reserved) throw new Error("not authorized: SQLITE_AUTH");
      if (beyond !== null) {
        throw new Error(`too many SQL variables at offset ${beyond}: SQLITE_ERROR`);
      }
      const bound = last ? values : [];
      if (largest !== bound.length) throw new Error(WRONG_BINDING_COUNT);
      bound.forEach((value, index) => statement.bindValue(value, index + 1));
      const rows = [];
      try {
        while (statement.step()) rows.push(statement.get().map(fromColumn));
      } catch (error) {
        throw sqliteError(String(error.message ?? error));
      }
      if (last) {
        const writes = /^(INSERT|UPDATE|DELETE|REPLACE|WITH)$/.test(word);
        const written = writes ? this.sqlite.getRowsModified() : 0;
        this.log.push({ query, bindings: [...bindings] });
        return new SqlStorageCursor(statement.getColumnNames(), rows, written);
      }
    }
    if (seen === 0) throw new Error("SQL code did not contain a statement.");
    throw new Error("do stand-in: the last statement was not run");
  }
}

// What the rules above read from a statement's text, kept per text: they
// depend on nothing else, and scanning a long statement on every exec made
// the stand-in's own JavaScript cost more than the SQLite work behind it.
const TEXT_RULES = new Map();
const MAX_TEXT_RULES = 4096;

function textRules(text) {
  let rules = TEXT_RULES.get(text);
  if (rules === undefined) {
    const word = firstWord(text);
    const reserved = mentionsReservedName(text) || (word === "PRAGMA" && /user_version/i.test(text));
    rules = { word, reserved, ...scanParameters(text) };
    if (TEXT_RULES.size >= MAX_TEXT_RULES) TEXT_RULES.clear();
    TEXT_RULES.set(text, rules);
  }
  return rules;
}

function stripComments(text) {
  return text.replace(/--[^\n]*(\n|$)|\/\*[\s\S]*?(\*\/|$)/g, " ");
}

class SqlStorage {
  constructor(owner) {
    this._owner = owner;
  }

  exec(query, ...bindings) {
    return this._owner._database().run(query, bindings);
  }

  get databaseSize() {
    const database = this._owner._database().sqlite;
    const [[pages]] = database.exec("PRAGMA page_count")[0].values;
    const [[free]] = database.exec("PRAGMA freelist_count")[0].values;
    const [[size]] = database.exec("PRAGMA page_size")[0].values;
    return (pages - free) * size;
  }
}

/** `ctx.storage` of one incarnation of the object. */
export class DurableObjectStorage {
  constructor(database) {
    this._db = database;
    this.evicted = false;
    this.sql = new SqlStorage(this);
  }

  _database() {
    if (this.evicted) {
      throw new Error("this Durable Object storage was evicted; the object has a new incarnation");
    }
    return this._db;
  }

  transactionSync(fn) {
    const database = this._database();
    if (typeof fn !== "function") {
      throw new TypeError("Failed to execute 'transactionSync' on 'DurableObjectStorage': parameter 1 is not of type 'Function'.");
    }
    const name = `_cf_sync_savepoint_${database.depth}`;
    database.depth += 1;
    try {
      database.sqlite.run(`SAVEPOINT ${name}`);
      let result;
      try {
        result = fn();
      } catch (error) {
        database.sqlite.run(`ROLLBACK TO ${name}`);
        database.sqlite.run(`RELEASE ${name}`);
        throw error;
      }
      database.sqlite.run(`RELEASE ${name}`);
      return result;
    } finally {
      database.depth -= 1;
    }
  }

  async setAlarm(scheduledTime) {
    const database = this._database();
    let millis;
    if (scheduledTime instanceof Date) millis = scheduledTime.getTime();
    else if (typeof scheduledTime === "number") millis = scheduledTime;
    else {
      throw new TypeError("Failed to execute 'setAlarm' on 'DurableObjectStorage': parameter 1 is not of type 'Date'.");
    }
    if (!Number.isFinite(millis)) {
      throw new TypeError("The value cannot be converted because it is not a valid Date.");
    }
    database.alarm = Math.trunc(millis);
  }

  async getAlarm() {
    return this._database().alarm;
  }

  async deleteAlarm() {
    this._database().alarm = null;
  }
}

/** A fresh object: its database and the storage of its first incarnation
 * (``loadSqlite()`` must have finished). */
export function newDurableObjectStorage() {
  if (SQL === null) throw new Error("do stand-in: await loadSqlite() first");
  return new DurableObjectStorage(new DurableObjectDatabase(SQL));
}

/** The storage of the object's next incarnation; the old one stops working. */
export function evict(storage) {
  storage.evicted = true;
  return new DurableObjectStorage(storage._db);
}

/** Another storage object over the same database (a second process, for tests). */
export function reopen(storage) {
  return new DurableObjectStorage(storage._db);
}
