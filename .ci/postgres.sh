#!/usr/bin/env bash
# Install (from Debian's packages, if missing) and start a PostgreSQL server for the tests,
# and print the admin URL the tests use (BOSUN_TEST_POSTGRES_URL).
set -euo pipefail

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

if ! command -v pg_lsclusters >/dev/null 2>&1 || [ -z "$(ls /usr/lib/postgresql/*/bin/postgres 2>/dev/null)" ]; then
  echo "ci: installing PostgreSQL from Debian's packages" >&2
  as_root apt-get update -qq >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
fi

version=$(ls /usr/lib/postgresql | sort -V | tail -n 1)
if ! pg_lsclusters -h | awk '{print $1" "$2}' | grep -q "^$version main$"; then
  as_root pg_createcluster "$version" main >&2
fi
if ! pg_lsclusters -h | grep "^$version main" | grep -q online; then
  as_root pg_ctlcluster "$version" main start >&2
fi

port=$(pg_lsclusters -h | awk -v v="$version" '$1 == v && $2 == "main" {print $3}')
for _ in $(seq 1 50); do
  as_root su postgres -c "psql -p $port -qtAc 'select 1'" >/dev/null 2>&1 && break
  sleep 0.2
done
as_root su postgres -c "psql -p $port -qc \"ALTER USER postgres PASSWORD 'postgres'\"" >&2
echo "postgresql+asyncpg://postgres:postgres@127.0.0.1:$port/postgres"
