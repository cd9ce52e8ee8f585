/**
 * One status line (a progress bar) at the bottom of the terminal, and everything else
 * written above it. Log lines (stderr) and result lines (stdout) go through write(): while
 * a status line is shown, it is erased, the line is written, and the status line is drawn
 * again, so the two never interleave on one line. Without a status line write() is a plain
 * write. Only a TTY gets a status line; piped output never sees an escape sequence.
 */

type Stream = Pick<NodeJS.WriteStream, 'write'> & { isTTY?: boolean; columns?: number };

const ERASE_LINE = '\r\x1b[2K';

class Terminal {
  #status: { stream: Stream; text: string } | null = null;

  write(stream: Stream, text: string): void {
    const status = this.#status;
    if (!status) {
      stream.write(text);
      return;
    }
    status.stream.write(ERASE_LINE);
    stream.write(text);
    status.stream.write(status.text);
  }

  /** Shows (or replaces) the status line; cut to the terminal's width so it never wraps. */
  setStatus(stream: Stream, text: string): void {
    if (stream.isTTY !== true) return;
    const width = stream.columns && stream.columns > 1 ? stream.columns - 1 : 120;
    const line = text.length > width ? text.slice(0, width) : text;
    if (this.#status && this.#status.stream !== stream) this.#status.stream.write(ERASE_LINE);
    stream.write(`${ERASE_LINE}${line}`);
    this.#status = { stream, text: line };
  }

  /** Erases the status line; what follows starts at the beginning of a clean line. */
  clearStatus(): void {
    if (!this.#status) return;
    this.#status.stream.write(ERASE_LINE);
    this.#status = null;
  }
}

export const terminal = new Terminal();

/**
 * A progress bar's bar: `[######..........]`, `width` cells filled by `share` (0–1), or
 * `?` cells when the total is unknown (null).
 */
export function bar(share: number | null, width = 24): string {
  if (share === null) return `[${'?'.repeat(width)}]`;
  const filled = Math.round(Math.min(1, Math.max(0, share)) * width);
  return `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}]`;
}
