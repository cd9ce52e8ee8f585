// Shared launcher for bin/*: checks the Node version (type stripping needs >= 22.12
// with TypeScript support) and runs src/cli/<name>.ts's main(argv) → exit code.
export async function launch(name) {
  const [major, minor] = process.versions.node.split('.').map(Number);
  if (major < 22 || (major === 22 && minor < 12) || !process.features?.typescript) {
    process.stderr.write(
      `github-push-ingestor needs Node >= 22.12 with type stripping (this is ${process.version}).\n` +
        'Run: . scripts/use-node.sh   (fetches Node 24 from the npm registry when needed)\n',
    );
    process.exit(2);
  }
  const { runMain } = await import('../../src/cli/run-main.ts');
  const mod = await import(`../../src/cli/${name}.ts`);
  await runMain(name, mod.main, process.argv.slice(2));
}
