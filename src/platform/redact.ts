/**
 * No secret in any line (docs/observability.md "Secrets"). A URL's userinfo
 * (`user:password@`) is needed only to make the request: an archive mirror behind basic
 * auth, a proxy in GITHUB_API_URL, the password in DATABASE_URL. Everything that shows or
 * stores a URL — log lines, stdout, /status, the page, every table — goes through this one
 * function, which removes the userinfo of every URL in a text and leaves the rest as it is
 * (so a redacted mirror is still the key it was, without its secret).
 *
 * What counts as userinfo: after `scheme://`, everything up to the last `@` before the
 * authority ends (`/`, `?`, `#`, white space, a quote, `<`, `>` or a backslash — none of
 * them can be in a userinfo as a URL serializes it, and they end a URL inside a JSON string
 * or a message). src/platform/config/config.ts serializes a URL that has a userinfo, so a raw `"` or space in
 * a password becomes `%22` or `%20` before anything can show it.
 */
const USERINFO = /\b([a-z][a-z0-9+.-]*:\/\/)(?:[^\s/?#@"<>\\]*@)+/gi;

/** `text` with the userinfo of every URL in it removed: `http://u:p@host/x` → `http://host/x`. */
export function withoutUserinfo(text: string): string {
  return text.includes('@') ? text.replace(USERINFO, '$1') : text;
}

/** Whether a URL (or a text) carries a userinfo that withoutUserinfo would remove. */
export function hasUserinfo(text: string): boolean {
  return withoutUserinfo(text) !== text;
}

/** The longest error text a ledger row keeps (an attempt's detail, a push's commits_error). */
const DETAIL_MAX = 500;

/** Error text for the ledger: bounded, and never a credential (tokens, secrets, auth headers). */
export function redact(text: string): string {
  return withoutUserinfo(text)
    .replace(/\b(gh[pousr]_[A-Za-z0-9_]{10,}|github_pat_[A-Za-z0-9_]{10,})\b/g, '[redacted]')
    .replace(
      /(authorization|token|secret)(["':=\s]+)(bearer\s+|token\s+)?[^\s"',}]+/gi,
      '$1$2[redacted]',
    )
    .slice(0, DETAIL_MAX);
}
