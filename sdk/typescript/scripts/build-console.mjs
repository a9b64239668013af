// build-console bundles the web console (controlplane/console/src) with the
// pinned esbuild into controlplane/console/dist, which bc-server embeds.
// Usage: node scripts/build-console.mjs [OUTDIR]   (make console; make
// console-check builds into .cache and compares)
import { build } from "esbuild";
import { copyFile, mkdir, rm } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
const src = path.join(root, "controlplane/console/src");
const out = path.resolve(process.argv[2] ?? path.join(root, "controlplane/console/dist"));

await rm(out, { recursive: true, force: true });
await mkdir(out, { recursive: true });
await build({
  entryPoints: [path.join(src, "main.tsx")],
  outfile: path.join(out, "console.js"),
  bundle: true,
  format: "esm",
  platform: "browser",
  target: "es2022",
  minify: true,
  legalComments: "none",
  // The pages are Preact components in TSX (the automatic JSX runtime).
  jsx: "automatic",
  jsxImportSource: "preact",
  // The client's packages come from sdk/typescript's lockfile.
  nodePaths: [path.join(root, "sdk/typescript/node_modules")],
  logLevel: "warning",
});
for (const f of ["index.html", "console.css"]) {
  await copyFile(path.join(src, f), path.join(out, f));
}
