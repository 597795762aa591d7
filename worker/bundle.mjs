// Stages the Worker's runtime modules into dist/worker/ (wrangler.toml [build]).
//
// Why a staging directory: for a Python Worker, wrangler uploads every *.py
// under the module root (base_dir) with a built-in "**/*.py" rule that a
// wrangler.toml cannot narrow (its [[rules]] accept no "PythonModule" type),
// and it walks .venv/, node_modules/, tests/ and bench/ too. So the module
// root is this staged copy, holding exactly the runtime code with its
// repository paths (`import tickwork`, `from durable_objects.job_owner import
// JobOwner` work unchanged):
//
//   tickwork/**/*.py      except the CPython-only parts (worker/bundle-exclude.json)
//   worker/**/*.py        the Worker (this script is not Python: not staged)
//   durable_objects/**/*.py
//
// Run by `wrangler deploy` / `wrangler dev` through [build] command; runs with
// the Node that runs wrangler, so it needs nothing else. Usage:
//   node worker/bundle.mjs [out-dir]       (default dist/worker)
// The output directory is emptied first, so it must lie inside dist/ (the
// gitignored build folder); anything else is refused.

import { copyFileSync, mkdirSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { dirname, isAbsolute, join, relative, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const DIST = join(ROOT, "dist");
const OUT = resolve(ROOT, process.argv[2] ?? join("dist", "worker"));

export const PACKAGES = ["tickwork", "worker", "durable_objects"];

// CPython-only code, never imported by the Worker or the Durable Object: the
// local host (sqlite3, ssl, sockets) and the command line (demo, __main__).
// One list, shared with the tests.
export const EXCLUDED = JSON.parse(
  readFileSync(join(ROOT, "worker", "bundle-exclude.json"), "utf8"),
).excluded;

function* pythonFiles(directory) {
  let entries;
  try {
    entries = readdirSync(directory, { withFileTypes: true });
  } catch (error) {
    if (error.code === "ENOENT") return;
    throw error;
  }
  for (const entry of entries.sort((a, b) => a.name.localeCompare(b.name))) {
    const path = join(directory, entry.name);
    if (entry.isDirectory()) {
      if (entry.name !== "__pycache__") yield* pythonFiles(path);
    } else if (entry.isFile() && entry.name.endsWith(".py")) {
      yield path;
    }
  }
}

function excluded(name) {
  return EXCLUDED.some((rule) => (rule.endsWith("/") ? name.startsWith(rule) : name === rule));
}

const inDist = relative(DIST, OUT);
if (inDist === "" || inDist.startsWith("..") || isAbsolute(inDist)) {
  console.error(
    `tickwork: refusing to stage into ${OUT}: the output folder is emptied first, ` +
      `so it must be a folder inside ${DIST} (e.g. dist/worker)`,
  );
  process.exit(2);
}
rmSync(OUT, { recursive: true, force: true });
let staged = 0;
for (const pkg of PACKAGES) {
  for (const file of pythonFiles(join(ROOT, pkg))) {
    const name = relative(ROOT, file).split(sep).join("/");
    if (excluded(name)) continue;
    mkdirSync(dirname(join(OUT, name)), { recursive: true });
    copyFileSync(file, join(OUT, name));
    staged += 1;
  }
}
console.log(`tickwork: staged ${staged} runtime modules in ${relative(ROOT, OUT)}`);
