import { MAX_JSON_DEPTH } from './bounded.ts';
import { isRawJson } from './exact.ts';

/**
 * Iterative walks over parsed JSON (never recursion: a hostile document can be nested
 * millions of levels deep, and every recursive walk would die of stack overflow on it).
 *
 * What Postgres cannot hold: U+0000 anywhere in text or jsonb (an encoding error), and
 * lone UTF-16 surrogates in jsonb (`\ud800` is refused by the jsonb parser; in a text
 * column they silently become U+FFFD). And what our own code cannot write back out:
 * nesting deeper than JSON.stringify's recursion, which is far deeper than MAX_JSON_DEPTH.
 */

export type TextFault = 'nul' | 'lone_surrogate';

export interface JsonInspection {
  /** Path of the first value nested deeper than maxDepth, or null. */
  tooDeep: string | null;
  /** Path and kind of the first string (or key) Postgres cannot store exactly, or null. */
  badText: { path: string; fault: TextFault } | null;
}

export function textFault(s: string): TextFault | null {
  if (s.includes('\u0000')) return 'nul';
  if (!s.isWellFormed()) return 'lone_surrogate';
  return null;
}

/** The same text, storable: NUL and lone surrogates become U+FFFD (visibly replaced). */
export function storableText(s: string): string {
  return s.toWellFormed().replaceAll('\u0000', '\uFFFD');
}

/**
 * A value still to visit. Its path is built only when a fault is found there (walking the
 * parents): building every value's path up front was most of the poll path's mapping cost.
 */
interface Frame {
  value: unknown;
  depth: number;
  parent: Frame | null;
  key: string | number;
}

function childPath(path: string, key: string | number): string {
  if (typeof key === 'number') return `${path}[${key}]`;
  return path ? `${path}.${key}` : key;
}

function pathOf(frame: Frame, root: string): string {
  const keys: (string | number)[] = [];
  for (let f: Frame | null = frame; f?.parent; f = f.parent) keys.push(f.key);
  let path = root;
  for (let i = keys.length - 1; i >= 0; i--) path = childPath(path, keys[i]!);
  return path;
}

/** Depth 1 is a scalar or an empty container at the top; each container adds one. */
export function inspectJson(value: unknown, maxDepth = MAX_JSON_DEPTH, root = ''): JsonInspection {
  const out: JsonInspection = { tooDeep: null, badText: null };
  const stack: Frame[] = [{ value, depth: 1, parent: null, key: '' }];
  while (stack.length > 0 && (out.tooDeep === null || out.badText === null)) {
    const frame = stack.pop()!;
    const { value: v, depth } = frame;
    if (typeof v === 'string') {
      const fault = out.badText ? null : textFault(v);
      if (fault) out.badText = { path: pathOf(frame, root) || 'value', fault };
      continue;
    }
    if (v === null || typeof v !== 'object' || isRawJson(v)) continue;
    if (depth > maxDepth) {
      out.tooDeep ??= pathOf(frame, root) || 'value';
      continue;
    }
    if (Array.isArray(v)) {
      for (let i = v.length - 1; i >= 0; i--) {
        stack.push({ value: v[i], depth: depth + 1, parent: frame, key: i });
      }
      continue;
    }
    for (const k of Object.keys(v)) {
      if (!out.badText) {
        const fault = textFault(k);
        if (fault) out.badText = { path: childPath(pathOf(frame, root), k), fault };
      }
      const child = (v as Record<string, unknown>)[k];
      stack.push({ value: child, depth: depth + 1, parent: frame, key: k });
    }
  }
  return out;
}

/** Placeholder for a subtree cut off at maxDepth in a storable copy. */
const CUT_DEEPER = '[nested deeper than the limit; cut]';

/**
 * A copy Postgres can store as jsonb: strings and keys through storableText, subtrees
 * deeper than maxDepth replaced by CUT_DEEPER. Built iteratively.
 */
export function storableCopy(value: unknown, maxDepth = MAX_JSON_DEPTH): unknown {
  const convert = (v: unknown): unknown => (typeof v === 'string' ? storableText(v) : v);
  if (value === null || typeof value !== 'object' || isRawJson(value)) return convert(value);
  const rootOut: unknown = Array.isArray(value) ? [] : {};
  const stack: { src: object; dst: unknown; depth: number }[] = [
    { src: value, dst: rootOut, depth: 1 },
  ];
  while (stack.length > 0) {
    const { src, dst, depth } = stack.pop()!;
    const entries: [string | number, unknown][] = Array.isArray(src)
      ? src.map((v, i) => [i, v])
      : Object.entries(src);
    for (const [k, child] of entries) {
      let out: unknown;
      if (child !== null && typeof child === 'object' && !isRawJson(child)) {
        if (depth + 1 > maxDepth) out = CUT_DEEPER;
        else {
          out = Array.isArray(child) ? [] : {};
          stack.push({ src: child, dst: out, depth: depth + 1 });
        }
      } else {
        out = convert(child);
      }
      if (Array.isArray(dst)) dst[k as number] = out;
      // defineProperty: a "__proto__" key is data here, never a prototype to set.
      else
        Object.defineProperty(dst, storableText(String(k)), {
          value: out,
          enumerable: true,
          writable: true,
          configurable: true,
        });
    }
  }
  return rootOut;
}
