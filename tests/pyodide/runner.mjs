// The real-Pyodide tier: runs tickwork's Workers code inside Pyodide under Node.
//
//   node tests/pyodide/runner.mjs --out results.jsonl [--suite NAME ...] [--only TEXT]
//
// (--only: just the cases whose id matches the regular expression TEXT.)
//
// Started by tests/pyodide/test_real_pyodide.py (bash scripts/test runs it);
// by hand it prints a summary to stderr and each case's result as a JSON line
// to --out.
//
// What it sets up, in one Node process:
// * Pyodide with the staged Workers bundle on its path (js/pyodide_host.mjs:
//   --pyodide 0.28, the build workerd runs for tickwork's compatibility date,
//   or 314); the repository (for tests/) and the virtualenv's site-packages
//   (pytest, for pytest.raises and marks) after it.
// * A Durable Object ctx.storage as a JS object (js/do_storage.mjs: sql.js
//   SQLite with workerd's measured rules), and Miniflare's real D1 (the
//   D1Database objects of mf.getD1Database, called from Python as JS objects).
// * The Python side (inside/run.py) collects the cases (collect.py) and runs them.

import { mkdirSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { Miniflare } from "miniflare";
import { PYODIDE_LINES, bootPyodide } from "./js/pyodide_host.mjs";
import * as doStorage from "./js/do_storage.mjs";
import * as bindings from "./js/bindings.mjs";

const D1_DATABASES = 8;
const COMPATIBILITY_DATE = "2026-04-01";

function options(argv) {
  const out = { suites: [], out: null, line: "0.28", only: "" };
  for (let i = 0; i < argv.length; i += 1) {
    if (argv[i] === "--out") out.out = resolve(argv[++i]);
    else if (argv[i] === "--pyodide") out.line = argv[++i];
    else if (argv[i] === "--suite") out.suites.push(argv[++i]);
    else if (argv[i] === "--only") out.only = argv[++i];
    else throw new Error(`runner: unknown argument ${argv[i]}`);
  }
  if (out.out === null) throw new Error("runner: --out FILE is required");
  if (!(out.line in PYODIDE_LINES)) {
    throw new Error(`runner: --pyodide takes ${Object.keys(PYODIDE_LINES).join(" or ")}`);
  }
  return out;
}

async function main() {
  const args = options(process.argv.slice(2));
  const started = performance.now();
  const { py, version: pyodideVersion, path } = await bootPyodide({
    line: args.line, stage: `pyodide-tier-${args.line}` });  // a stage per line: lines run at once

  await doStorage.loadSqlite();
  const databases = Array.from({ length: D1_DATABASES }, (_, i) => `DB_${i}`);
  let mf;
  let d1 = [];
  const startMiniflare = async () => {
    mf = new Miniflare({
      modules: true,
      script: "export default { fetch() { return new Response(null, { status: 404 }); } };",
      d1Databases: databases,
      d1Persist: false,
      compatibilityDate: COMPATIBILITY_DATE,
    });
    d1 = [];
    for (const name of databases) d1.push(await mf.getD1Database(name));
  };
  await startMiniflare();

  mkdirSync(dirname(args.out), { recursive: true });
  py.FS.mkdirTree("/out");
  py.FS.mount(py.FS.filesystems.NODEFS, { root: dirname(args.out) }, "/out");

  let nextDatabase = 0;
  py.registerJsModule("tickwork_tier", {
    pyodideVersion,
    /** workerd's binding classes (js/bindings.mjs), for inside/workerd.py. */
    bindings,
    newStorage: () => doStorage.newDurableObjectStorage(),
    evictStorage: (storage) => doStorage.evict(storage),
    reopenStorage: (storage) => doStorage.reopen(storage),
    /** The next D1 database of the pool (the fixture empties it). */
    nextD1: () => d1[nextDatabase++ % d1.length],
    /** A fresh Miniflare: its synchronous proxy channel lost step (see run.py). */
    restartMiniflare: async () => {
      await mf.dispose();
      await startMiniflare();
    },
    /** Throw a JS Error: how a remote RPC failure reaches the caller. */
    throwError: (message) => {
      throw new Error(message);
    },
    typeOf: (value) => typeof value,
    isArray: (value) => Array.isArray(value),
  });

  let failed = 0;
  try {
    failed = await py.runPythonAsync(`
import sys
sys.path[:0] = ${JSON.stringify(path)}
from tests.pyodide.inside.run import main
await main(${JSON.stringify("/out/" + args.out.split("/").pop())}, ${JSON.stringify(args.suites)},
           ${JSON.stringify(args.only)})
`);
  } finally {
    await mf.dispose();
  }
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  process.stderr.write(`real-Pyodide tier (pyodide ${pyodideVersion}): ${failed} failed, ${seconds} s\n`);
  process.exit(0);
}

main().catch((error) => {
  process.stderr.write(`real-Pyodide tier could not run: ${error.stack ?? error}\n`);
  process.exit(2);
});
