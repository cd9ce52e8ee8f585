/**
 * Waits on a signal, not a sleep: polls `probe` until it returns a truthy value or the
 * deadline passes, then fails naming what it waited for and the last value seen.
 */
export async function waitFor<T>(
  probe: () => Promise<T> | T,
  {
    timeoutMs = 15_000,
    intervalMs = 50,
    what = 'condition',
  }: { timeoutMs?: number; intervalMs?: number; what?: string } = {},
): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const last = await probe();
    if (last) return last as NonNullable<T>;
    if (Date.now() > deadline) {
      throw new Error(
        `timed out after ${timeoutMs} ms waiting for ${what} (last: ${JSON.stringify(last)})`,
      );
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}
