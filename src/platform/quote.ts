/**
 * An outside value (an operator's argument, a SOURCES entry) quoted inside a message: JSON
 * string syntax, so control characters and quotes cannot forge the rest of the line, and at
 * most QUOTE_MAX characters of it, then how long it really was — a 100,000-character login
 * is refused in one readable line, not echoed back whole.
 */
export const QUOTE_MAX = 80;

/**
 * Characters that change how a terminal shows the rest of a line without being seen: C0 and
 * C1 controls (escape sequences), line and paragraph separators, bidirectional embeddings,
 * overrides and isolates (U+202A–U+202E, U+2066–U+2069, the marks U+200E, U+200F, U+061C:
 * "Trojan Source", CVE-2021-42574), and the invisible ones (zero-width spaces and joiners,
 * word joiner, BOM).
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: they are what is escaped
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]/g;

/** `text` with every UNSAFE character written as `\uXXXX`: what is shown is what is there. */
export function escapeUnsafe(text: string): string {
  return text.replace(UNSAFE, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

export function quoted(value: string, max = QUOTE_MAX): string {
  const chars = Array.from(value); // code points: never half a surrogate pair
  // JSON escapes the controls; escapeUnsafe the bidirectional and invisible ones as well.
  if (chars.length <= max) return escapeUnsafe(JSON.stringify(value));
  return `${escapeUnsafe(JSON.stringify(chars.slice(0, max).join('')))}…(${chars.length} characters)`;
}

/** A message that may embed outside text (a parser's complaint): its first `max` characters. */
export function bounded(message: string, max = 300): string {
  const chars = Array.from(message);
  return chars.length <= max
    ? message
    : `${chars.slice(0, max).join('')}…(${chars.length} characters)`;
}
