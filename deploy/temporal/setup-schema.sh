#!/bin/sh
# Creates Temporal's two PostgreSQL databases when absent and brings their
# schemas up to the versions embedded in temporal-sql-tool (the tool of the
# same release as the server). Safe to run on every start: `create` and
# `setup-schema -v 0.0` leave an existing database as it is, and
# `update-schema` applies only the versions it has not applied yet, so a
# newer image upgrades the schema in place.
#
# Run by the temporal-schema service of docker-compose.yml
# (temporalio/admin-tools image).
set -eu

: "${POSTGRES_SEEDS:?}" "${POSTGRES_USER:?}" "${SQL_PASSWORD:?}"
DB_PORT=${DB_PORT:-5432}
DBNAME=${DBNAME:-temporal}
VISIBILITY_DBNAME=${VISIBILITY_DBNAME:-temporal_visibility}

sql() {
  temporal-sql-tool --plugin postgres12 --ep "$POSTGRES_SEEDS" -p "$DB_PORT" -u "$POSTGRES_USER" "$@"
}

for pair in "$DBNAME:postgresql/v12/temporal" "$VISIBILITY_DBNAME:postgresql/v12/visibility"; do
  db=${pair%%:*}
  schema=${pair#*:}
  echo "temporal-schema: $db ($schema)"
  sql --db "$db" create
  sql --db "$db" setup-schema -v 0.0
  sql --db "$db" update-schema --schema-name "$schema"
done
# toolgate's decision ledger gets a database of its own; toolgate creates
# its tables. Set LEDGER_DBNAME empty to skip it.
if [ -n "${LEDGER_DBNAME-toolgate_ledger}" ]; then
  echo "temporal-schema: ${LEDGER_DBNAME-toolgate_ledger} (toolgate's decision ledger)"
  sql --db "${LEDGER_DBNAME-toolgate_ledger}" create
fi
echo "temporal-schema: done"
