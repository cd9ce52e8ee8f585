import { daysAhead, untilText } from '../platform/time-text.ts';

/** Small formatting helpers shared by the HTML page and the terminal picture. */

/** 42 → "42s", 300 → "5m", 5400 → "1h30m", 200000 → "2d7h". */
export function duration(seconds: number): string {
  const s = Math.round(Math.abs(seconds));
  if (s < 60) return `${s}s`;
  if (s < 3600)
    return `${Math.floor(s / 60)}m${s % 60 ? `${String(s % 60).padStart(2, '0')}s` : ''}`;
  if (s < 86_400) {
    const m = Math.floor((s % 3600) / 60);
    return `${Math.floor(s / 3600)}h${m ? `${String(m).padStart(2, '0')}m` : ''}`;
  }
  const h = Math.floor((s % 86_400) / 3600);
  return `${Math.floor(s / 86_400)}d${h ? `${h}h` : ''}`;
}

/** "in 45s", "3m ago", "now"; "never" for null. */
export function relative(at: Date | null, now: Date): string {
  if (at === null) return 'never';
  const delta = (at.getTime() - now.getTime()) / 1000;
  if (Math.abs(delta) < 1) return 'now';
  return delta > 0 ? `in ${duration(delta)}` : `${duration(delta)} ago`;
}

/** 1234567 → "1,234,567". */
export function count(n: number): string {
  return n.toLocaleString('en-US');
}

/**
 * When a source polls next: "in 45s", or "due" once the time has come; a day or more ahead
 * with its date too ("in 1d (2026-12-03 08:16 UTC)"): a source set aside, or put off by a
 * header, says until when.
 */
export function nextPoll(at: Date, now: Date): string {
  if (at.getTime() <= now.getTime()) return 'due';
  return daysAhead(at, now) ? `${relative(at, now)} (${untilText(at, now)})` : relative(at, now);
}

/** A window's spend beside what it may spend (BudgetSnapshot's spent and allowance). */
export interface SpendOf {
  spent: { poll: number; enrich: number; commits: number };
  allowance: { poll: number; enrich: number };
}

/**
 * The spend by the allowance each part draws on: polls' own, and the background allowance
 * that enrichment and commit fetching share ("40 + 7 = 47/3333": enrich + commits).
 */
export function spendParts(s: SpendOf): { poll: string; background: string } {
  const { poll, enrich, commits } = s.spent;
  return {
    poll: `${count(poll)}/${count(s.allowance.poll)}`,
    background: `${count(enrich + commits)}/${count(s.allowance.enrich)}`,
  };
}

/** A points window as three parts that add up to its quota. */
export interface WindowParts {
  /** Spent by this deployment in the window (its ledger). */
  spent: number;
  /** Spent by something else on the same credentials: GitHub's count says less is left. */
  elsewhere: number;
  /** What the deployment may still spend: the less of GitHub's remaining and quota − spent. */
  left: number;
}

/**
 * The window as parts that add up: spent + elsewhere + left = quota. The ledger's spend and
 * GitHub's remaining are two counts (GitHub's is as of its last answer, and counts what
 * other clients of the same token spent); the budget refuses at whichever runs out first, so
 * that is what is left, and what GitHub counts beyond the ledger is shown as spent elsewhere.
 */
export function windowParts(w: {
  spent: number;
  quota: number;
  remaining: number | null;
}): WindowParts {
  const byLedger = Math.max(0, w.quota - w.spent);
  const left = w.remaining === null ? byLedger : Math.max(0, Math.min(w.remaining, byLedger));
  return { spent: w.spent, elsewhere: byLedger - left, left };
}
