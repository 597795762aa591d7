// Pyodide under Node with tickwork's Workers code on its path: what the
// real-Pyodide tier (runner.mjs) and the Durable Object benchmark
// (bench/durable_object.mjs) both start from.
//
// * Pyodide from an npm package pinned in package.json: line "0.28" (the
//   build workerd runs for tickwork's compatibility date) or "314" (Python
//   3.14, from the python_workers_20260610 flag on). Its FFI is the one the
//   Workers runtime uses: an int at +-(2**53 - 1) reaches JS as a BigInt
//   here exactly as there.
// * The code Workers load, staged by worker/bundle.mjs (what wrangler
//   uploads: tickwork/ without the CPython host, worker/, durable_objects/)
//   into dist/<stage>; the repository is mounted at /repo (for tests/ and
//   bench/) and the virtualenv's site-packages (pytest) beside it.

import { execFileSync } from "node:child_process";
import { existsSync, readdirSync, realpathSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
// The Pyodide lines Workers run: 0.28.2 (Python 3.13; compatibility dates
// before python_workers_20260610) and 314 (Python 3.14, from that flag on).
export const PYODIDE_LINES = { "0.28": "pyodide", "314": "pyodide-314" };

function sitePackages() {
  const lib = join(ROOT, ".venv", "lib");
  if (!existsSync(lib)) throw new Error(`no ${lib}: create the virtualenv (bash scripts/test)`);
  const python = readdirSync(lib).find((name) => name.startsWith("python3"));
  return join(lib, python, "site-packages");
}

/**
 * Stage the bundle into dist/<stage>, load Pyodide and mount the repository.
 * Returns {py, version, path}: `path` is what sys.path must start with (the
 * bundle, /repo, the tier's `workers` module, site-packages). Python's output
 * goes to stderr, so stdout stays free for whoever runs the script.
 */
export async function bootPyodide({ line = "0.28", stage }) {
  if (!(line in PYODIDE_LINES)) {
    throw new Error(`--pyodide takes ${Object.keys(PYODIDE_LINES).join(" or ")}`);
  }
  const { loadPyodide, version } = await import(PYODIDE_LINES[line]);
  execFileSync(process.execPath, [join(ROOT, "worker", "bundle.mjs"), join("dist", stage)],
    { cwd: ROOT, stdio: ["ignore", "ignore", "inherit"] });
  const py = await loadPyodide({
    stdout: (text) => process.stderr.write(`${text}\n`),
    stderr: (text) => process.stderr.write(`${text}\n`),
  });
  py.FS.mkdirTree("/repo");
  py.FS.mount(py.FS.filesystems.NODEFS, { root: ROOT }, "/repo");
  // A git worktree may share another checkout's virtualenv through a
  // symlink: its absolute target must exist inside Pyodide's file system too.
  const venv = realpathSync(join(ROOT, ".venv"));
  if (venv !== join(ROOT, ".venv")) {
    py.FS.mkdirTree(venv);
    py.FS.mount(py.FS.filesystems.NODEFS, { root: venv }, venv);
  }
  const site = "/repo" + sitePackages().slice(ROOT.length);
  const path = [`/repo/dist/${stage}`, "/repo", "/repo/tests/pyodide/inside/sdk", site];
  return { py, version, path };
}
