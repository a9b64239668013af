// A payload form generated from a kind's JSON Schema (kinds.list's
// payloadSchema), and the payload checked in the browser against the same
// schema before it is sent. The validator is @cfworker/json-schema: it
// interprets the schema (draft 2020-12) instead of compiling it to code,
// so it runs under the console's Content-Security-Policy, which allows no
// eval (Ajv compiles each schema with new Function).
import { Validator } from "@cfworker/json-schema";
import type { Schema } from "@cfworker/json-schema";
import type { JSX } from "preact";
import { useState } from "preact/hooks";

import type { Kind } from "../../../sdk/typescript/src/web.js";

type Json = null | boolean | number | string | Json[] | { [k: string]: Json };

interface Prop {
  type?: string | string[];
  enum?: Json[];
  items?: Prop;
  description?: string;
  minimum?: number;
  maximum?: number;
  default?: Json;
}

/**
 * The payload fields the control plane fills for a kind and refuses from a
 * caller (logs.collect's upload destination, cap and bundle key, as
 * controlplane/bundles MergePayload does), each with a stand-in value: the
 * form leaves them out, and the check fills the stand-ins in as the server
 * fills the real values before it checks the same schema.
 */
const serverFilled: Record<string, Record<string, Json>> = {
  "logs.collect": { uploadUrl: "https://payload-check.invalid/", maxBytes: 1 << 30, supportBundle: true, bundleKey: "support-bundles/payload-check.bundle" },
};

export function parseSchema(k: Kind | undefined): Schema | undefined {
  if (!k?.payloadSchema) {
    return undefined;
  }
  return JSON.parse(k.payloadSchema) as Schema;
}

/**
 * checkPayload returns what is wrong with a payload for a kind (empty when
 * the schema accepts it): each error names the field and the rule.
 */
export function checkPayload(k: Kind, payload: Record<string, Json>): string[] {
  const schema = parseSchema(k);
  const filled = serverFilled[k.name] ?? {};
  const out: string[] = [];
  for (const f of Object.keys(filled)) {
    if (f in payload) {
      out.push(`${f}: the control plane fills it; leave it out`);
    }
  }
  if (!schema || out.length > 0) {
    return out;
  }
  const draft = String(schema.$schema ?? "").includes("draft-07") ? "7" : "2020-12";
  const v = new Validator(schema, draft, false);
  const r = v.validate({ ...payload, ...filled });
  if (!r.valid) {
    for (const e of r.errors) {
      // The keyword errors name the field; the summary ones ("properties")
      // repeat them.
      if (e.keyword !== "properties" && e.keyword !== "items" && e.keyword !== "$ref") {
        out.push(`${e.instanceLocation.replace(/^#\/?/, "") || "payload"}: ${e.error}`);
      }
    }
    if (out.length === 0) {
      out.push(r.errors.map((e) => e.error).join("; "));
    }
  }
  return out;
}

function types(p: Prop): string[] {
  return Array.isArray(p.type) ? p.type : p.type ? [p.type] : [];
}

/** The value a field's text stands for: a number, a list, JSON, or the text. */
function parseField(p: Prop, text: string): Json | undefined {
  const t = types(p);
  if (text.trim() === "") {
    return undefined;
  }
  if (t.includes("integer") || t.includes("number")) {
    const n = Number(text);
    return Number.isNaN(n) ? text : n;
  }
  if (t.includes("array")) {
    return text.split(",").map((s) => s.trim()).filter(Boolean);
  }
  if (t.includes("object") || t.length === 0) {
    try {
      return JSON.parse(text) as Json;
    } catch {
      return text;
    }
  }
  return text;
}

/**
 * SchemaForm renders one input per property of the kind's schema (a
 * checkbox for a boolean, a select for an enum, checkboxes for a list of
 * enums, a number field, text for the rest) and reports the payload it
 * makes on every change. Empty fields are left out of the payload.
 */
export function SchemaForm({ kind, onChange, idPrefix = "payload" }: { kind: Kind; onChange: (payload: Record<string, Json>) => void; idPrefix?: string }): JSX.Element {
  const schema = parseSchema(kind) as { properties?: Record<string, Prop>; required?: string[] } | undefined;
  const [values, setValues] = useState<Record<string, Json>>({});
  const filled = serverFilled[kind.name] ?? {};
  const props = Object.entries(schema?.properties ?? {}).filter(([name]) => !(name in filled));
  if (props.length === 0) {
    return <p class="muted" id={`${idPrefix}-none`}>{kind.name} takes no payload.</p>;
  }
  const set = (name: string, v: Json | undefined) => {
    const next = { ...values };
    if (v === undefined) {
      delete next[name];
    } else {
      next[name] = v;
    }
    setValues(next);
    onChange(next);
  };
  const required = new Set(schema?.required ?? []);
  return (
    <fieldset class="schema-form" id={`${idPrefix}-form`}>
      <legend>Payload of {kind.name} (from its schema)</legend>
      {props.map(([name, p]) => {
        const id = `${idPrefix}-${name}`;
        const t = types(p);
        let input: JSX.Element;
        if (t.includes("boolean")) {
          input = <input type="checkbox" id={id} name={name} checked={values[name] === true} onChange={(e) => set(name, e.currentTarget.checked ? true : undefined)} />;
        } else if (p.enum) {
          input = (
            <select id={id} name={name} onChange={(e) => set(name, e.currentTarget.value === "" ? undefined : (p.enum![Number(e.currentTarget.value)] ?? null))}>
              <option value="">—</option>
              {p.enum.map((v, i) => <option value={String(i)} key={i}>{JSON.stringify(v)}</option>)}
            </select>
          );
        } else if (t.includes("array") && p.items?.enum) {
          const chosen = (values[name] as Json[] | undefined) ?? [];
          input = (
            <span id={id} class="choices">
              {p.items.enum.map((v) => (
                <label key={String(v)}>
                  <input type="checkbox" value={String(v)} checked={chosen.includes(v)}
                    onChange={(e) => {
                      const next = e.currentTarget.checked ? [...chosen, v] : chosen.filter((x) => x !== v);
                      set(name, next.length ? next : undefined);
                    }} /> {String(v)}
                </label>
              ))}
            </span>
          );
        } else {
          const onInput = (e: { currentTarget: HTMLInputElement }) => set(name, parseField(p, e.currentTarget.value));
          input = t.includes("integer") || t.includes("number")
            ? <input id={id} name={name} type="number" min={p.minimum} max={p.maximum} onInput={onInput} />
            : <input id={id} name={name} type="text" placeholder={t.includes("array") ? "comma-separated" : t.includes("string") ? "" : "JSON"} onInput={onInput} />;
        }
        return (
          <div class="field" key={name}>
            <label for={id}><code>{name}</code>{required.has(name) ? " (required)" : ""}</label> {input}
            {p.description ? <div class="muted help">{p.description}</div> : null}
          </div>
        );
      })}
      <details><summary>Payload as sent</summary><pre id={`${idPrefix}-json`}>{JSON.stringify(values, null, 2)}</pre></details>
    </fieldset>
  );
}

export type { Json };
