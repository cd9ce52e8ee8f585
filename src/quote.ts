/**
 * An outside value (an operator's argument, a SOURCES entry) quoted inside a message: JSON
 * string syntax, so control characters and quotes cannot forge the rest of the line, and at
 * most QUOTE_MAX characters of it, then how long it really was — a 100,000-character login
 * is refused in one readable line, not echoed back whole.
 */
export const QUOTE_MAX = 80;

export function quoted(value: string, max = QUOTE_MAX): string {
  const chars = Array.from(value); // code points: never half a surrogate pair
  if (chars.length <= max) return JSON.stringify(value);
  return `${JSON.stringify(chars.slice(0, max).join(''))}…(${chars.length} characters)`;
}

/** A message that may embed outside text (a parser's complaint): its first `max` characters. */
export function bounded(message: string, max = 300): string {
  const chars = Array.from(message);
  return chars.length <= max
    ? message
    : `${chars.slice(0, max).join('')}…(${chars.length} characters)`;
}
