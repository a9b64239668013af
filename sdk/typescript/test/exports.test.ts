// The package as its users import it, by name: docs/api.md's snippet
// imports { ApiError, createClient } from '@better-compute/client'. Node
// resolves the name to the connect-node build, a bundler for browsers to
// the connect-web one ("browser", then "default"), and
// '@better-compute/client/web' names the browser build outright.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFile, access } from "node:fs/promises";

const name = "@better-compute/client";

test("the package's name gives Node createClient and ApiError, and /web the browser build", async () => {
  // Through a variable, so that this is the runtime's resolution of the
  // package's exports (a self-reference), not the compiler's.
  const spec: string = name;
  const node = (await import(spec)) as Record<string, unknown>;
  assert.equal(typeof node.createClient, "function", "createClient from the package's name");
  assert.equal(typeof node.ApiError, "function", "ApiError from the package's name");
  const web = (await import(spec + "/web")) as Record<string, unknown>;
  assert.equal(typeof web.createClient, "function", "createClient from /web");
});

test("a bundler for browsers resolves the package's name to the connect-web build, with types", async () => {
  const pkg = JSON.parse(await readFile(new URL("../../package.json", import.meta.url), "utf8"));
  const dot = pkg.exports["."];
  assert.equal(dot.browser, "./dist/src/web.js");
  assert.equal(dot.default, "./dist/src/web.js", "a bundler without the browser condition gets the web build too");
  assert.equal(dot.node, "./dist/src/node.js");
  for (const f of [dot.types, dot.browser, dot.node, pkg.exports["./web"].types]) {
    await access(new URL("../../" + f, import.meta.url));
  }
  const web = await readFile(new URL("../../" + dot.browser, import.meta.url), "utf8");
  assert.match(web, /@connectrpc\/connect-web/);
  assert.doesNotMatch(web, /@connectrpc\/connect-node/);
});
