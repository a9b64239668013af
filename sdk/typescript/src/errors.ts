// ApiError is what every method of the client throws for an error the API
// answered: the API's code (ErrorInfo.reason, the spec's code name), the
// details (ErrorInfo.metadata) and the reason among them, as typed fields.
import { Code, ConnectError } from "@connectrpc/connect";
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";

/** The spec's error codes, and INTERNAL for what no code covers. */
export type ApiErrorCode =
  | "INVALID_INPUT"
  | "INVALID_STATE"
  | "NOT_FOUND"
  | "CONFLICT"
  | "UNSUPPORTED"
  | "PERMISSION_DENIED"
  | "UNAUTHENTICATED"
  | "UNAVAILABLE"
  | "INTERNAL";

/** The ErrorInfo domain of the API's errors. */
export const errorDomain = "api.better-compute";

const errorInfoType = "google.rpc.ErrorInfo";

// The code an error without an ErrorInfo gets (a proxy's, the network's).
const fromConnectCode: Partial<Record<Code, ApiErrorCode>> = {
  [Code.InvalidArgument]: "INVALID_INPUT",
  [Code.FailedPrecondition]: "INVALID_STATE",
  [Code.NotFound]: "NOT_FOUND",
  [Code.AlreadyExists]: "CONFLICT",
  [Code.Unimplemented]: "UNSUPPORTED",
  [Code.PermissionDenied]: "PERMISSION_DENIED",
  [Code.Unauthenticated]: "UNAUTHENTICATED",
  [Code.Unavailable]: "UNAVAILABLE",
};

/** An error the API (or the way to it) answered. */
export class ApiError extends Error {
  override readonly name = "ApiError";
  /** The API's code: NOT_FOUND, CONFLICT, INVALID_STATE, ... */
  readonly code: ApiErrorCode;
  /** details.reason when the API gave one (batch-required, too-many-watches). */
  readonly reason: string | undefined;
  /** The error's details (ErrorInfo.metadata): { reason, kind, nodeId, ... }. */
  readonly details: Readonly<Record<string, string>>;
  /** The transport's code (Connect's Code), for retry decisions. */
  readonly connectCode: Code;

  constructor(code: ApiErrorCode, message: string, details: Record<string, string>, connectCode: Code, cause?: unknown) {
    super(message, { cause });
    this.code = code;
    this.details = Object.freeze({ ...details });
    this.reason = details.reason;
    this.connectCode = connectCode;
  }

  /** An ApiError from anything a Connect call threw. */
  static from(err: unknown): ApiError {
    if (err instanceof ApiError) {
      return err;
    }
    const ce = ConnectError.from(err);
    let code: ApiErrorCode | undefined;
    let details: Record<string, string> = {};
    for (const d of ce.details) {
      if ("type" in d && d.type === errorInfoType) {
        const info = decodeErrorInfo(d.value);
        if (info.domain === errorDomain || info.reason !== "") {
          code = info.reason as ApiErrorCode;
          details = info.metadata;
        }
      }
    }
    return new ApiError(code ?? fromConnectCode[ce.code] ?? "INTERNAL", ce.rawMessage, details, ce.code, err);
  }
}

/** google.rpc.ErrorInfo, decoded from its wire form. */
export interface ErrorInfo {
  reason: string;
  domain: string;
  metadata: Record<string, string>;
}

// decodeErrorInfo reads google.rpc.ErrorInfo { string reason = 1; string
// domain = 2; map<string, string> metadata = 3; }, the one detail the API
// sends; the message is too small to ship googleapis' descriptors for.
export function decodeErrorInfo(bytes: Uint8Array): ErrorInfo {
  const r = new BinaryReader(bytes);
  const info: ErrorInfo = { reason: "", domain: "", metadata: {} };
  while (r.pos < r.len) {
    const [no, wt] = r.tag();
    if (no === 1 && wt === WireType.LengthDelimited) {
      info.reason = r.string();
    } else if (no === 2 && wt === WireType.LengthDelimited) {
      info.domain = r.string();
    } else if (no === 3 && wt === WireType.LengthDelimited) {
      const end = r.uint32() + r.pos;
      let key = "";
      let value = "";
      while (r.pos < end) {
        const [eno, ewt] = r.tag();
        if (eno === 1 && ewt === WireType.LengthDelimited) {
          key = r.string();
        } else if (eno === 2 && ewt === WireType.LengthDelimited) {
          value = r.string();
        } else {
          r.skip(ewt);
        }
      }
      info.metadata[key] = value;
    } else {
      r.skip(wt);
    }
  }
  return info;
}
