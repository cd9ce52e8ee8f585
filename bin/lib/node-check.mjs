// Can this Node run the project? One answer for bin/* (entry.mjs imports it) and for
// scripts/use-node.sh (runs it as a script: exit 0 yes, 1 no with the reason on stderr),
// so a Node that passes one passes the other (ADR 0001). The project runs TypeScript by
// Node's type stripping, on by default from Node 22.18 and 23.6 (Node 24 in practice).
// Plain JavaScript that parses on any Node still in use, so an old Node gets the message.
import { pathToFileURL } from 'node:url';

/** null when this Node can run the project, else why not and what to do. */
export function nodeProblem(p = process) {
  // biome-ignore lint/complexity/useOptionalChain: must parse on a Node too old for `?.`
  if (p.features && p.features.typescript) return null;
  const [major, minor] = p.versions.node.split('.').map(Number);
  const tooOld = major < 22 || (major === 22 && minor < 18) || (major === 23 && minor < 6);
  if (tooOld) {
    return {
      reason: `Node ${p.version} does not run TypeScript by default (type stripping needs Node >= 22.18 or >= 23.6; the project uses Node 24)`,
      fix: 'Run: . scripts/use-node.sh   (puts Node 24 first on PATH; fetches it from the npm registry once)',
    };
  }
  return {
    reason: `Node ${p.version} has type stripping turned off (NODE_OPTIONS=${JSON.stringify(p.env.NODE_OPTIONS || '')})`,
    fix: 'Remove --no-experimental-strip-types (or --no-strip-types) from NODE_OPTIONS',
  };
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  const problem = nodeProblem();
  if (problem) process.stderr.write(`${problem.reason}\n${problem.fix}\n`);
  process.exit(problem ? 1 : 0);
}
