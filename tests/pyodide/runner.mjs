// The real-Pyodide tier: runs tickwork's Workers code inside Pyodide under Node.
//
//   node tests/pyodide/runner.mjs --out results.jsonl [--suite NAME ...]
//
// Started by tests/pyodide/test_real_pyodide.py (bash scripts/test runs it);
// by hand it prints a summary to stderr and each case's result as a JSON line
// to --out.
//
// What it sets up, in one Node process:
// * Pyodide from an npm package pinned in package.json: --pyodide 0.28 (the
//   build workerd runs for tickwork's compatibility date) or 314 (Python
//   3.14, from the python_workers_20260610 flag on). Its FFI is the one the
//   Workers runtime uses: an int at +-(2**53 - 1) reaches JS as a BigInt
//   here exactly as there.
// * The code Workers load, staged by worker/bundle.mjs (what wrangler
//   uploads: tickwork/ without the CPython host, worker/, durable_objects/),
//   first on sys.path; the repository (for tests/) and the virtualenv's
//   site-packages (pytest, for pytest.raises and marks) after it.
// * A Durable Object ctx.storage as a JS object (js/do_storage.mjs: sql.js
//   SQLite with workerd's measured rules), and Miniflare's real D1 (the
//   D1Database objects of mf.getD1Database, called from Python as JS objects).
// * The Python side (inside/run.py) collects the cases (collect.py) and runs them.

import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readdirSync, realpathSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Miniflare } from "miniflare";
// The Pyodide lines Workers run: 0.28.2 (Python 3.13; compatibility dates
// before python_workers_20260610) and 314 (Python 3.14, from that flag on).
const PYODIDE_LINES = { "0.28": "pyodide", "314": "pyodide-314" };
import * as doStorage from "./js/do_storage.mjs";

// sql.js's unminified build (js/do_storage.mjs) reports every heap resize
// through console.warn; those lines say nothing about the tests.
const warn = console.warn.bind(console);
console.warn = (...args) => {
  if (typeof args[0] === "string" && args[0].startsWith("Heap resize call")) return;
  warn(...args);
};

const HERE = dirname(fileURLToPath(import.meta.url));
const ROOT = resolve(HERE, "..", "..");
const D1_DATABASES = 8;
const COMPATIBILITY_DATE = "2026-04-01";

function options(argv) {
  const out = { suites: [], out: null, line: "0.28" };
  for (let i = 0; i < argv.length; i += 1) {
    if (argv[i] === "--out") out.out = resolve(argv[++i]);
    else if (argv[i] === "--pyodide") out.line = argv[++i];
    else if (argv[i] === "--suite") out.suites.push(argv[++i]);
    else throw new Error(`runner: unknown argument ${argv[i]}`);
  }
  if (out.out === null) throw new Error("runner: --out FILE is required");
  if (!(out.line in PYODIDE_LINES)) {
    throw new Error(`runner: --pyodide takes ${Object.keys(PYODIDE_LINES).join(" or ")}`);
  }
  return out;
}

function sitePackages() {
  const lib = join(ROOT, ".venv", "lib");
  if (!existsSync(lib)) throw new Error(`runner: no ${lib}: create the virtualenv (bash scripts/test)`);
  const python = readdirSync(lib).find((name) => name.startsWith("python3"));
  return join(lib, python, "site-packages");
}

async function main() {
  const args = options(process.argv.slice(2));
  const { loadPyodide, version: pyodideVersion } = await import(PYODIDE_LINES[args.line]);
  const started = performance.now();

  // The Workers bundle, staged as for wrangler (only under dist/).
  execFileSync(process.execPath, [join(ROOT, "worker", "bundle.mjs"), join("dist", "pyodide-tier")],
    { cwd: ROOT, stdio: ["ignore", "ignore", "inherit"] });

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

  // Python's output goes to stderr: stdout is free for whoever runs us.
  const py = await loadPyodide({
    stdout: (line) => process.stderr.write(`${line}\n`),
    stderr: (line) => process.stderr.write(`${line}\n`),
  });
  mkdirSync(dirname(args.out), { recursive: true });
  py.FS.mkdirTree("/repo");
  py.FS.mount(py.FS.filesystems.NODEFS, { root: ROOT }, "/repo");
  // A git worktree may share another checkout's virtualenv through a
  // symlink: its absolute target must exist inside Pyodide's file system too.
  const venv = realpathSync(join(ROOT, ".venv"));
  if (venv !== join(ROOT, ".venv")) {
    py.FS.mkdirTree(venv);
    py.FS.mount(py.FS.filesystems.NODEFS, { root: venv }, venv);
  }
  py.FS.mkdirTree("/out");
  py.FS.mount(py.FS.filesystems.NODEFS, { root: dirname(args.out) }, "/out");
  const bundle = "/repo/dist/pyodide-tier";
  const site = "/repo" + sitePackages().slice(ROOT.length);

  let nextDatabase = 0;
  py.registerJsModule("tickwork_tier", {
    pyodideVersion,
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
sys.path[:0] = ${JSON.stringify([bundle, "/repo", "/repo/tests/pyodide/inside/sdk", site])}
from tests.pyodide.inside.run import main
await main(${JSON.stringify("/out/" + args.out.split("/").pop())}, ${JSON.stringify(args.suites)})
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
