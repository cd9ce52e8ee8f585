import { createHmac, timingSafeEqual } from 'node:crypto';

/**
 * X-Hub-Signature-256 over the body's bytes exactly as received (never over a decoded
 * string: a body that is not valid UTF-8 would be re-encoded with U+FFFD and no longer
 * be what GitHub signed). Constant time once the header has the right shape.
 */
const SIGNATURE = /^sha256=([0-9a-fA-F]{64})$/;

/**
 * Whether the header can be a signature at all: checked before the body is read, so a request that cannot be signed never holds any of the body budget.
 */
export function signatureShaped(header: string | undefined): boolean {
  return header !== undefined && SIGNATURE.test(header.trim());
}

export function verifySignature(secret: string, body: Buffer, header: string): boolean {
  const m = SIGNATURE.exec(header.trim());
  if (!m) return false;
  const expected = createHmac('sha256', secret).update(body).digest();
  return timingSafeEqual(expected, Buffer.from(m[1]!, 'hex'));
}
