// Helpers for the API's well-known types: a Command's result and progress
// are google.protobuf.Value messages, its times Timestamps.
import { toJson } from "@bufbuild/protobuf";
import type { JsonValue } from "@bufbuild/protobuf";
import { ValueSchema, timestampDate } from "@bufbuild/protobuf/wkt";
import type { Timestamp, Value } from "@bufbuild/protobuf/wkt";

/** The JSON a Value holds (a command's result or progress); undefined when unset. */
export function jsonOf(v: Value | undefined): JsonValue | undefined {
  return v === undefined ? undefined : toJson(ValueSchema, v);
}

/** A Timestamp as a Date; undefined when unset. */
export function toDate(t: Timestamp | undefined): Date | undefined {
  return t === undefined ? undefined : timestampDate(t);
}
