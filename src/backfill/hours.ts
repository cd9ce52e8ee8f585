// GH Archive's hour arithmetic lives in src/store/archive-hours.ts, below both the poll runner
// (which records gaps) and the backfill (which fills them); the backfill's modules and
// tests keep importing it from here.
export * from '../store/archive-hours.ts';
