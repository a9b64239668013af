// The stack the tests run against, from scripts/test-ts (make test-ts).
import net from "node:net";

function need(name: string): string {
  const v = process.env[name];
  if (!v) {
    throw new Error(`${name} is not set: run the tests through scripts/test-ts (make test-ts), which starts bc-server and the nodes`);
  }
  return v;
}

export const env = {
  baseUrl: need("BC_TS_BASE_URL"),
  token: need("BC_TS_TOKEN"),
  tenant: need("BC_TS_TENANT"),
  healthy: need("BC_TS_HEALTHY"),
  faulty: need("BC_TS_FAULTY"),
  offline: need("BC_TS_OFFLINE"),
  proxyTarget: need("BC_TS_PROXY_TARGET"),
  /** A second bc-server on the same database without pki (scripts/test-ts). */
  unsignedUrl: process.env.BC_TS_UNSIGNED_URL ?? "",
};

/** A unique suffix, so that tests' idempotency keys never meet. */
export function unique(prefix: string): string {
  return `${prefix}-${process.pid}-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
}

/**
 * A TCP proxy in front of bc-server, to break connections as a network does:
 * cut() destroys every open connection, and while blocked every new one is
 * closed at once.
 */
export class Proxy {
  private readonly sockets = new Set<net.Socket>();
  blocked = false;
  private constructor(private readonly server: net.Server) {}

  static async start(target: string): Promise<Proxy & { url: string }> {
    const [host, port] = target.split(":");
    const server = net.createServer();
    const p = new Proxy(server);
    server.on("connection", (client) => {
      if (p.blocked) {
        client.destroy();
        return;
      }
      const upstream = net.connect(Number(port), host);
      p.sockets.add(client).add(upstream);
      const drop = () => {
        client.destroy();
        upstream.destroy();
        p.sockets.delete(client);
        p.sockets.delete(upstream);
      };
      client.on("error", drop).on("close", drop);
      upstream.on("error", drop).on("close", drop);
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const addr = server.address() as net.AddressInfo;
    return Object.assign(p, { url: `http://127.0.0.1:${addr.port}` });
  }

  /** Breaks every open connection. */
  cut(): void {
    for (const s of this.sockets) {
      s.destroy();
    }
    this.sockets.clear();
  }

  async close(): Promise<void> {
    this.cut();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** Waits for the iterator's next value that matches, with a deadline. */
export async function nextMatching<T>(it: AsyncIterator<T>, match: (v: T) => boolean, ms: number, what: string): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const left = deadline - Date.now();
    if (left <= 0) {
      throw new Error(`timed out waiting for ${what}`);
    }
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms waiting for ${what}`)), left);
    });
    try {
      const r = await Promise.race([it.next(), timeout]);
      if (r.done) {
        throw new Error(`the iterator ended before ${what}`);
      }
      if (match(r.value)) {
        return r.value;
      }
    } finally {
      clearTimeout(timer);
    }
  }
}

/**
 * Waits, with a deadline, for a value whose key is known only later: a
 * watch may deliver a command's event before commands.run has answered with
 * the command's id. The reading starts at once (which opens a watch's
 * stream); get(key) returns the value, whether it came before or after.
 */
export class Later<T> {
  private readonly seen = new Map<string, T>();
  private want = "";
  /** Settles when the wanted value has come, or fails at the deadline. */
  readonly reading: Promise<T>;

  constructor(it: AsyncIterator<T>, key: (v: T) => string, ms: number, what: string) {
    this.reading = nextMatching(it, (v) => {
      this.seen.set(key(v), v);
      return this.want !== "" && this.seen.has(this.want);
    }, ms, what);
    // get awaits it; a test that found its value early ends the watch,
    // which ends the reading too.
    this.reading.catch(() => undefined);
  }

  async get(k: string): Promise<T> {
    this.want = k;
    const early = this.seen.get(k);
    if (early !== undefined) {
      return early;
    }
    await this.reading;
    return this.seen.get(k)!;
  }
}
