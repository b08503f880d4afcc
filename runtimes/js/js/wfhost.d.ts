// Types of the "wfhost" module for JavaScript workflows written in TypeScript: compile with your
// own tsc or esbuild to an ES module, then `wfhost build main.js`. `wfhost types` writes this file.
//
//     import type { Context } from "wfhost";
//     export async function greet(ctx: Context, name: string): Promise<string> { ... }

declare module "wfhost" {
  /** A JSON value: what inputs, results, messages and calls carry. */
  export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

  /** The pid of the host: `await ctx.send(HOST, value)` reaches the application that started
   * the workflow. */
  export const HOST: 0;

  /** Thrown at the await in progress when the workflow is cancelled. Catch it to clean up (the
   * context's commands still run), then throw it again. */
  export class Cancelled extends Error {
    constructor(message?: string);
  }

  /** A command the host could not carry out. */
  export class CommandError extends Error {
    constructor(kind: string, reason: string);
    /** Why: `child-failed`, `child-cancelled`, `timeout`, `no-such-process`, `function-failed`,
     * `not-allowed`, ... */
    readonly kind: string;
    /** What the host said. */
    readonly reason: string;
  }

  /** Options of `ctx.http`, in `fetch`'s shape. */
  export interface HttpOptions {
    method?: string;
    /** An object, or `[name, value]` pairs for a name given twice. */
    headers?: Record<string, string> | Array<[string, string]>;
    body?: string | Uint8Array | ArrayBuffer;
    /** Milliseconds. */
    timeout?: number;
  }

  /** What `ctx.http` answers. */
  export interface HttpResponse {
    readonly status: number;
    /** Whether the status is 2xx. */
    readonly ok: boolean;
    readonly headers: Array<[string, string]>;
    readonly body: Uint8Array;
    /** The first value of header `name` (any case), or `null`. */
    header(name: string): string | null;
    text(): string;
    json(): any;
  }

  /** A workflow's handle on its host. Every method is a command the host journals. */
  export class Context {
    private constructor();
    /** This workflow's pid. */
    readonly pid: number;
    /** The pid of the workflow that spawned it, or `null`. */
    readonly parent: number | null;
    /** The entry point it runs. */
    readonly entry: string;
    /** Completes after `ms` milliseconds of the host's time. */
    sleep(ms: number): Promise<void>;
    /** The time the current step began, in milliseconds since the Unix epoch (what
     * `Date.now()` gives during the step). */
    now(): number;
    /** A number in [0, 1). */
    random(): number;
    info(text: unknown): void;
    warn(text: unknown): void;
    /** Sends `value` to workflow `to` (`HOST`: the host). */
    send(to: number, value: Json): Promise<void>;
    /** The next message. */
    recv<T = any>(): Promise<T>;
    /** The next message, or `undefined` if none comes within `timeout` milliseconds. */
    recv<T = any>(options: { timeout: number }): Promise<T | undefined>;
    /** Starts entry point `entry` of this module as a child: its pid. */
    spawn(entry: string, input?: Json): Promise<number>;
    /** The child's result once it ends; a failed or cancelled child throws a `CommandError`. */
    join<T = any>(child: number): Promise<T>;
    /** Asks child `child` to stop. */
    cancel(child: number): Promise<void>;
    /** Calls host or worker function `name` with `input`: its answer. */
    call<T = any>(name: string, input?: Json): Promise<T>;
    /** An outbound HTTP request, through the host's allowlist. */
    http(url: string, options?: HttpOptions): Promise<HttpResponse>;
    /** The first of `commands` (what these methods return, not yet settled) to complete:
     * `[index, value]`. The others are abandoned: a `recv` leaves its message for the next one.
     * (`Promise.race` leaves the losers running: a `recv` that lost still takes a message.) */
    select(commands: Array<Promise<any>>): Promise<[number, any]>;
    /** Whether the code after patch `changeId` runs (see `wfhost upgrade`). */
    patched(changeId: string): boolean;
  }
}
