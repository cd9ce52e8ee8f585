/**
 * How many of a pass's polls may be at a request gate at once in this process: one a
 * credential (ADR 0140). A poll takes a ticket before it opens and gives it back once it no
 * longer holds a gate — its first held answer settled (the gate is free again), or the poll
 * ended. The pass's other polls wait for a ticket here, outside any transaction and holding
 * nothing, instead of opening, finding every gate held by this process's own polls, and
 * waiting on the gate's own connection (the fallback of a request not held: two commits
 * more a poll).
 * Another process's polls are not counted: a gate one of them holds is still tried past.
 */
export class GateTickets {
  #free: number;
  readonly #waiting: (() => void)[] = [];

  constructor(capacity: number) {
    this.#free = Math.max(1, capacity);
  }

  /** Waits for a ticket; the function returned gives it back (once, however often called). */
  async take(): Promise<() => void> {
    if (this.#free > 0) this.#free--;
    else await new Promise<void>((resolve) => this.#waiting.push(resolve));
    let given = false;
    return () => {
      if (given) return;
      given = true;
      const next = this.#waiting.shift();
      if (next) next();
      else this.#free++;
    };
  }

  /** Tickets free now (tests). */
  get free(): number {
    return this.#free;
  }
}

/**
 * A poll session's set of held gate keys (src/budget/poll-session.ts) that says when it
 * empties after `arm()`: the first held request's settle, for the ticket. Before arming (the
 * opening transaction's tries at busy gates) it is a plain set.
 */
export class WatchedGates extends Set<number> {
  #armed = false;
  #onEmpty: (() => void) | null;

  constructor(onEmpty: (() => void) | null) {
    super();
    this.#onEmpty = onEmpty;
  }

  arm(): void {
    this.#armed = true;
    if (this.size === 0) this.#fire();
  }

  override delete(key: number): boolean {
    const had = super.delete(key);
    if (had && this.#armed && this.size === 0) this.#fire();
    return had;
  }

  #fire(): void {
    const f = this.#onEmpty;
    this.#onEmpty = null;
    f?.();
  }
}
