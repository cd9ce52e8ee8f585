// GH Archive's hour arithmetic lives in src/gaps/hours.ts, below both the poll runner
// (which records gaps) and the backfill (which fills them); the backfill's modules and
// tests keep importing it from here.
export * from '../gaps/hours.ts';
