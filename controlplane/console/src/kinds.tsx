// The registered kinds: every version kinds.list holds (a fleet mid-upgrade
// runs two), each with its digest (the manifest's SHA-256, which a node's
// Hello must match or a command waits), whether commands.run accepts it
// and the versions dispatched in its place; and one kind version's page
// (kinds.get) with its payload schema as fields and as JSON. The registry
// changes only when bc-server reloads, which no event announces: the pages
// read it when opened.
import type { JSX } from "preact";
import { useEffect, useState } from "preact/hooks";

import type { Kind } from "../../../sdk/typescript/src/web.js";
import { ErrorLine, Muted, api, rowKeys } from "./core.js";
import { parseSchema } from "./schemaform.js";

/** A digest, its first 12 hex digits shown and the whole on hover. */
export function Digest({ d, id }: { d: string; id?: string }): JSX.Element {
  if (!d) {
    return <Muted>—</Muted>;
  }
  return <code class="digest" id={id} title={d} data-digest={d}>{d.length > 12 ? `${d.slice(0, 12)}…` : d}</code>;
}

/** A kind version's page. */
export function kindHref(name: string, version?: string): string {
  return `#/kinds/${encodeURIComponent(name)}${version ? `/${encodeURIComponent(version)}` : ""}`;
}

/** 120 seconds as "2m", 90 as "1m30s", 3600 as "1h". */
export function duration(seconds: bigint): string {
  let s = Number(seconds);
  const parts: string[] = [];
  for (const [unit, n] of [["h", 3600], ["m", 60]] as const) {
    if (s >= n) {
      parts.push(`${Math.floor(s / n)}${unit}`);
      s %= n;
    }
  }
  if (s > 0 || parts.length === 0) {
    parts.push(`${s}s`);
  }
  return parts.join("");
}

function flagNames(k: Kind): string[] {
  const f = k.flags;
  return f ? [f.retrySafe && "retry-safe", f.destructive && "destructive", f.selfTerminating && "self-terminating", f.attested && "attested"].filter((x): x is string => !!x) : [];
}

/** Whether commands.run accepts the kind, and if not, why not. */
function runnable(k: Kind): JSX.Element {
  const why = [!k.apiRunnable && "not apiRunnable", !k.allowlisted && "not allowlisted"].filter(Boolean).join(", ");
  return <span class={why ? "muted" : ""} data-runnable={String(!why)}>{why ? `no (${why})` : "yes"}</span>;
}

function KindRow({ k }: { k: Kind }): JSX.Element {
  const open = kindHref(k.name, k.version);
  return (
    <tr data-kind={k.name} data-version={k.version} data-newest={String(k.newest)} {...rowKeys(open)}>
      <td><a href={open} tabIndex={-1}>{k.name}</a></td>
      <td>{k.version}{k.newest ? <span class="newest"> newest</span> : null}</td>
      <td class="compatible">{k.compatibleVersions ? <code>{k.compatibleVersions}</code> : <Muted>this digest only</Muted>}</td>
      <td class="digest-cell"><Digest d={k.digest} /></td>
      <td>{k.lane}</td>
      <td>{duration(k.timeoutSeconds)}</td>
      <td>{k.roles.join(", ")}</td>
      <td class="flags">{flagNames(k).map((f) => <span class={`flag flag-${f}`} key={f}>{f}</span>)}</td>
      <td class="runnable">{runnable(k)}</td>
      <td>{k.source}</td>
      <td class="description">{k.description}</td>
    </tr>
  );
}

export function KindsPage(): JSX.Element {
  const [kinds, setKinds] = useState<Kind[]>();
  const [err, setErr] = useState<unknown>();
  useEffect(() => {
    api().kinds.list({}).then((r) => setKinds(r.items), setErr);
  }, []);
  const heads = ["Kind", "Version", "Compatible versions", "Digest", "Lane", "Timeout", "Roles", "Flags", "commands.run", "Source", "Description"];
  return (
    <section>
      <h1>Kinds</h1>
      <p class="muted">
        Every kind version bc-server has registered (kinds.list), newest version first: its own (first-party) and those in its kindsDir. A node
        runs a kind's commands when its Hello reports a registered digest, or a version within a registered manifest's compatible versions;
        otherwise they wait, and the command says why. The registry changes when bc-server reloads: reload this page to see it.
      </p>
      <ErrorLine err={err} />
      <table id="kinds">
        <thead><tr>{heads.map((x) => <th key={x}>{x}</th>)}</tr></thead>
        <tbody>
          {kinds === undefined ? <tr><td colSpan={heads.length} class="muted">{err ? "the kinds could not be read" : "loading…"}</td></tr>
            : kinds.length === 0 ? <tr class="empty"><td colSpan={heads.length} class="muted">no kinds are registered</td></tr>
            : kinds.map((k) => <KindRow k={k} key={`${k.name}@${k.version}`} />)}
        </tbody>
      </table>
    </section>
  );
}

interface Prop {
  type?: string | string[];
  enum?: unknown[];
  description?: string;
  [rule: string]: unknown;
}

/** The rules a property carries beside its type and description, as "minimum 0, maximum 60000". */
function rules(p: Prop): string {
  return Object.entries(p).filter(([k]) => !["type", "description", "title"].includes(k))
    .map(([k, v]) => `${k} ${typeof v === "object" ? JSON.stringify(v) : String(v)}`).join(", ");
}

/** The schema's top-level properties as a table; the JSON is below it for the rest. */
function SchemaFields({ k }: { k: Kind }): JSX.Element {
  const schema = parseSchema(k) as { properties?: Record<string, Prop>; required?: string[] } | undefined;
  const props = Object.entries(schema?.properties ?? {});
  if (props.length === 0) {
    return <p class="muted" id="schema-none">{k.payloadSchema ? `${k.name} takes no payload fields.` : `${k.name} takes no payload.`}</p>;
  }
  const required = new Set(schema?.required ?? []);
  return (
    <table id="schema-fields">
      <thead><tr>{["Field", "Type", "Required", "Rules", "Description"].map((x) => <th key={x}>{x}</th>)}</tr></thead>
      <tbody>
        {props.map(([name, p]) => (
          <tr key={name} data-field={name}>
            <td><code>{name}</code></td>
            <td>{Array.isArray(p.type) ? p.type.join(" | ") : p.type ?? "any"}</td>
            <td>{required.has(name) ? "required" : ""}</td>
            <td>{rules(p)}</td>
            <td>{p.description ?? ""}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function pretty(schema: string): string {
  try {
    return JSON.stringify(JSON.parse(schema), null, 2);
  } catch {
    return schema;
  }
}

/** One kind version (kinds.get; the newest when version is empty), with the kind's other versions. */
export function KindPage({ name, version }: { name: string; version: string }): JSX.Element {
  const [k, setK] = useState<Kind>();
  const [versions, setVersions] = useState<Kind[]>([]);
  const [err, setErr] = useState<unknown>();
  useEffect(() => {
    api().kinds.get({ name, version }).then(setK, setErr);
    api().kinds.list({}).then((r) => setVersions(r.items.filter((x) => x.name === name)), () => undefined);
  }, [name, version]);
  const row = (label: string, ...v: (JSX.Element | string | null)[]) => <tr><th>{label}</th><td>{v}</td></tr>;
  return (
    <section>
      <h1><a href="#/kinds">Kinds</a> / {name}{k ? ` ${k.version}` : version ? ` ${version}` : ""}</h1>
      <ErrorLine err={err} />
      {k ? (
        <div id="kind" data-kind={k.name} data-version={k.version}>
          <p>{k.description || <Muted>no description</Muted>}</p>
          <table class="fields" id="kind-fields">
            <tbody>
              {row("Version", k.version, k.newest ? " (the newest: new commands are checked against it)" : "")}
              {row("Digest", <code id="kind-digest" class="digest">{k.digest}</code>)}
              {row("Compatible versions", <span id="kind-compatible">{k.compatibleVersions
                ? `${k.compatibleVersions}: a node running another version in this range is dispatched under ${k.version}`
                : "none: only a node running this digest is dispatched under it"}</span>)}
              {row("Lane", k.lane)}
              {row("Timeout", `${duration(k.timeoutSeconds)} for one run on the node`)}
              {row("Roles", k.roles.join(", ") || "—")}
              {row("Flags", flagNames(k).join(", ") || "none")}
              {row("commands.run", runnable(k), k.apiRunnable && k.allowlisted ? "" : " (apiRunnable and on bc-server's allowlist are both needed)")}
              {row("Source", k.source === "kinds-dir" ? "kinds-dir (a manifest in bc-server's kindsDir)" : k.source)}
            </tbody>
          </table>
          {versions.length > 1 ? (
            <p id="kind-versions">Registered versions: {versions.map((v) => (
              <span key={v.version}>{v.version === k.version ? <b>{v.version}</b> : <a href={kindHref(name, v.version)}>{v.version}</a>}{v.newest ? " (newest)" : ""} </span>
            ))}</p>
          ) : null}
          <h2>Payload schema</h2>
          <SchemaFields k={k} />
          {k.payloadSchema ? <pre id="kind-schema">{pretty(k.payloadSchema)}</pre> : null}
        </div>
      ) : err ? null : <p class="muted">loading…</p>}
    </section>
  );
}

