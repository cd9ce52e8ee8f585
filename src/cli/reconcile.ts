import { createApp } from '../app.ts';
import { createBoss } from '../jobs/boss.ts';
import { type ReconcileReport, reconcile } from '../jobs/reconciler.ts';
import { countDue } from '../work/enrichment-due.ts';
import { parseCli } from './args.ts';

const USAGE = `
Usage: bin/reconcile [--json]

One reconciler pass, as the worker runs at start and every tick:
  - pg-boss jobs left 'active' by a worker that ended (its liveness lock is free) → failed,
    so their queue runs its next job
  - ingestion runs left 'running' by a process that ended (source lock free) → 'interrupted'
  - budget reservations never sent by a process that ended → settled as abandoned
  - for each entity class: due work and no live enrichment job → one cycle sent
Entity rows are never written. Safe beside a running worker. Prints what it found and did.

  --json  print the report as JSON

Exit codes: 0 ok; 1 error; 2 bad arguments or configuration.
`;

export function formatReport(report: ReconcileReport, due: Record<string, number>): string[] {
  const lines: string[] = [];
  const orphans = report.orphanedJobs;
  lines.push(
    orphans.length === 0
      ? 'jobs: none left active by a dead worker'
      : `jobs: ${orphans.length} left active by a dead worker, failed (${orphans
          .map((j) => `${j.queue} ${j.id}`)
          .join(', ')})`,
  );
  const runs = report.interruptedRuns;
  lines.push(
    runs.length === 0
      ? 'ingestion runs: none left running by a dead process'
      : `ingestion runs: ${runs.length} left running by a dead process, marked interrupted (${runs
          .map((r) => `run ${r.runId} of source ${r.sourceId}`)
          .join(', ')})`,
  );
  lines.push(`reservations: ${report.settledReservations} abandoned reservation(s) settled`);
  for (const c of report.classes) {
    const head = `${c.class}: ${due[c.class] ?? 0} due, ${c.liveJobs} live job(s)`;
    switch (c.action) {
      case 'dispatched':
        lines.push(`${head} → cycle sent (job ${c.jobId})`);
        break;
      case 'already_queued':
        lines.push(`${head} → a cycle was queued meanwhile; nothing sent`);
        break;
      case 'live_job':
        lines.push(`${head} → a cycle is queued or running; nothing sent`);
        break;
      case 'nothing_due':
        lines.push(`${head} → nothing to do`);
        break;
      case 'budget_wait':
        lines.push(`${head} → the enrichment budget is spent or blocked; nothing sent`);
        break;
    }
  }
  const k = report.commits;
  const action: Record<typeof k.action, string> = {
    dispatched: `cycle sent (job ${k.jobId})`,
    already_queued: 'a cycle was queued meanwhile; nothing sent',
    live_job: 'a cycle is queued or running; nothing sent',
    nothing_due: 'nothing to do',
    budget_wait:
      'the budget commits spend (GraphQL points; by REST the background budget) is spent or blocked; nothing sent',
  };
  lines.push(
    `commits: ${k.due ? 'pushes due' : 'none due'}, ${k.liveJobs} live job(s) → ${action[k.action]}`,
  );
  return lines;
}

export async function main(argv: string[]): Promise<number> {
  const parsed = parseCli(argv, USAGE, { json: { type: 'boolean' } });
  if (!parsed) return 0;
  const app = await createApp({ role: 'reconcile', poolMax: 2, requires: 'pgboss' });
  const boss = createBoss(app.databaseUrl, app.config, app.logger, {
    role: 'reconcile',
    max: 2,
    supervise: false,
  });
  try {
    await boss.start();
    const ttl = app.config.enrichment.ttlSeconds;
    const due = {
      actor: await countDue(app.db, 'actor', new Date(), ttl),
      repository: await countDue(app.db, 'repository', new Date(), ttl),
    };
    const report = await reconcile({ ...app, boss });
    if (parsed.values.json) {
      process.stdout.write(`${JSON.stringify({ ...report, due }, null, 2)}\n`);
    } else {
      for (const line of formatReport(report, due)) process.stdout.write(`${line}\n`);
    }
    return 0;
  } finally {
    await boss.stop({ graceful: false });
    await app.close();
  }
}
