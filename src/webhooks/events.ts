/**
 * GitHub's webhook event names (X-GitHub-Event), as documented. The header is not covered
 * by the signature, so its value is client input: it becomes a routing value and a metric
 * label only through this fixed list (anything else is `other`), so no sender can mint
 * unbounded Prometheus series or status keys.
 */
const GITHUB_EVENTS = new Set([
  'branch_protection_configuration',
  'branch_protection_rule',
  'check_run',
  'check_suite',
  'code_scanning_alert',
  'commit_comment',
  'create',
  'custom_property',
  'custom_property_values',
  'delete',
  'dependabot_alert',
  'deploy_key',
  'deployment',
  'deployment_protection_rule',
  'deployment_review',
  'deployment_status',
  'discussion',
  'discussion_comment',
  'fork',
  'github_app_authorization',
  'gollum',
  'installation',
  'installation_repositories',
  'installation_target',
  'issue_comment',
  'issue_dependencies',
  'issues',
  'label',
  'marketplace_purchase',
  'member',
  'membership',
  'merge_group',
  'meta',
  'milestone',
  'org_block',
  'organization',
  'package',
  'page_build',
  'personal_access_token_request',
  'ping',
  'project',
  'project_card',
  'project_column',
  'projects_v2',
  'projects_v2_item',
  'projects_v2_status_update',
  'public',
  'pull_request',
  'pull_request_review',
  'pull_request_review_comment',
  'pull_request_review_thread',
  'push',
  'registry_package',
  'release',
  'repository',
  'repository_advisory',
  'repository_dispatch',
  'repository_import',
  'repository_ruleset',
  'repository_vulnerability_alert',
  'secret_scanning_alert',
  'secret_scanning_alert_location',
  'secret_scanning_scan',
  'security_advisory',
  'security_and_analysis',
  'sponsorship',
  'star',
  'status',
  'sub_issues',
  'team',
  'team_add',
  'watch',
  'workflow_dispatch',
  'workflow_job',
  'workflow_run',
]);

/** The shape of an event name; anything else is refused (400) before it is recorded. */
export const EVENT_NAME = /^[a-z][a-z0-9_]{0,63}$/;

function knownEvent(event: string): string {
  return GITHUB_EVENTS.has(event) ? event : 'other';
}

/** routing for a delivery that is recorded but not a push. */
export function routingFor(event: string): string {
  if (event === 'ping') return 'ping';
  return `ignored:${knownEvent(event)}`;
}

const FIXED_ROUTINGS = new Set(['push:created', 'push:known', 'ping']);

/**
 * A stored routing as a bounded metric/status label: `push:*`, `ping`, `ignored:<known
 * event>`, `rejected:<reason>` pass; anything else (rows written before the list, or a
 * reason this version does not know) is folded into `ignored:other` / `rejected:other`.
 */
export function routingLabel(routing: string, reasons: readonly string[]): string {
  if (FIXED_ROUTINGS.has(routing)) return routing;
  const [kind, detail = ''] = routing.split(':', 2) as [string, string?];
  if (kind === 'ignored') return `ignored:${knownEvent(detail)}`;
  if (kind === 'rejected') return `rejected:${reasons.includes(detail) ? detail : 'other'}`;
  return 'other';
}
