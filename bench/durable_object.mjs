// The Durable Object benchmark's Node side: Pyodide 0.28.2 (the build workerd
// runs for tickwork's compatibility date) with the staged Workers bundle, a
// JS ctx.storage stand-in (tests/pyodide/js/do_storage.mjs: sql.js SQLite
// with workerd's measured rules), and bench/durable_object_inside.py run
// inside it. Prints that module's one JSON object on stdout; everything else
// goes to stderr. Spawned by `python -m bench.durable_object`.
//
//   node bench/durable_object.mjs --jobs 2000 --counted 200 --rounds 3

import { bootPyodide } from "../tests/pyodide/js/pyodide_host.mjs";
import * as doStorage from "../tests/pyodide/js/do_storage.mjs";

function options(argv) {
  const out = { jobs: 2000, counted: 200, rounds: 3 };
  for (let i = 0; i < argv.length; i += 1) {
    if (argv[i] === "--jobs") out.jobs = Number(argv[++i]);
    else if (argv[i] === "--counted") out.counted = Number(argv[++i]);
    else if (argv[i] === "--rounds") out.rounds = Number(argv[++i]);
    else throw new Error(`durable_object.mjs: unknown argument ${argv[i]}`);
  }
  for (const name of ["jobs", "counted", "rounds"]) {
    if (!Number.isInteger(out[name]) || out[name] < 1) {
      throw new Error(`durable_object.mjs: --${name} takes a positive integer`);
    }
  }
  return out;
}

async function main() {
  const args = options(process.argv.slice(2));
  const { py, version, path } = await bootPyodide({ stage: "pyodide-bench" });
  await doStorage.loadSqlite();
  py.registerJsModule("tickwork_tier", {
    pyodideVersion: version,
    newStorage: () => doStorage.newDurableObjectStorage(),
    /** The cheapest JS call there is: the price of one FFI round trip. */
    noop: () => undefined,
  });
  const result = await py.runPythonAsync(`
import sys
sys.path[:0] = ${JSON.stringify(path)}
from bench.durable_object_inside import main
await main(${args.jobs}, ${args.counted}, ${args.rounds})
`);
  process.stdout.write(`${result}\n`);
}

main().catch((error) => {
  process.stderr.write(`durable_object.mjs: ${error.stack ?? error}\n`);
  process.exit(2);
});
